/* Byte-matrix transposes: the 16x16 vector blocks and the plain edges together
 * against the definition, over shapes that leave every kind of edge. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "lib/transpose.h"

static void check_shape(size_t rows, size_t cols, size_t src_pad, size_t dst_pad, unsigned seed) {
  size_t src_stride = cols + src_pad, dst_stride = rows + dst_pad;
  uint8_t *src = malloc(rows * src_stride + 1), *dst = malloc(cols * dst_stride + 1);
  for (size_t i = 0; i < rows * src_stride; i++) src[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
  memset(dst, 0xA5, cols * dst_stride);
  ferry_transpose_u8(src, rows, cols, src_stride, dst, dst_stride);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      cr_assert_eq(dst[c * dst_stride + r], src[r * src_stride + c], "%zux%zu: (%zu, %zu)", rows, cols, r, c);
  for (size_t c = 0; c < cols; c++) /* the padding between destination rows is left alone */
    for (size_t r = rows; r < dst_stride; r++) cr_assert_eq(dst[c * dst_stride + r], 0xA5);
  free(src);
  free(dst);
}

Test(transpose, matches_the_definition_for_every_edge) {
  static const size_t sizes[] = {1, 2, 15, 16, 17, 31, 32, 33, 100, 312};
  unsigned seed = 1;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++)
      check_shape(sizes[i], sizes[j], (i + j) % 3, (i * j) % 5, seed++);
}

Test(transpose, an_empty_matrix_writes_nothing) {
  uint8_t dst[4] = {7, 7, 7, 7};
  ferry_transpose_u8(NULL, 0, 5, 5, dst, 1);
  ferry_transpose_u8(NULL, 5, 0, 0, dst, 5);
  for (int i = 0; i < 4; i++) cr_assert_eq(dst[i], 7);
}
