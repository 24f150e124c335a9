/* tests/source/test_settings.c - ferry_source_options into the settings the client and
 * the blocks use (source/settings.c): zeroed options are the documented defaults, an
 * option reaches its setting, -1 is zero where zero is a setting, an option out of
 * range is refused naming it, and a FERRY_REMOTE_* variable in range wins over the
 * option (one out of range is ignored). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "source/remote.h"
#include "source/settings.h"

static void clear_env(void) {
  const char *names[] = {"FERRY_REMOTE_RETRIES",     "FERRY_REMOTE_BACKOFF_MS",
                         "FERRY_REMOTE_STALL_S",     "FERRY_REMOTE_CONNECT_TIMEOUT_MS",
                         "FERRY_REMOTE_BLOCK_BYTES", "FERRY_REMOTE_CACHE_BYTES",
                         "FERRY_REMOTE_ROOM_WAIT_MS"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unsetenv(names[i]);
}

TestSuite(settings, .init = clear_env, .fini = clear_env);

Test(settings, zeroed_options_are_the_defaults) {
  ferry_source_options o;
  memset(&o, 0, sizeof o);
  ferry__source_settings s, none;
  cr_assert_eq(ferry__source_settings_resolve(&o, &s), FERRY_OK);
  cr_assert_eq(ferry__source_settings_resolve(NULL, &none), FERRY_OK);
  cr_expect_eq(memcmp(&s, &none, sizeof s), 0);
  cr_expect_eq(s.retries, FERRY__REMOTE_RETRIES);
  cr_expect_eq(s.backoff_ms, FERRY__REMOTE_BACKOFF_MS);
  cr_expect_eq(s.stall_s, FERRY__REMOTE_STALL_S);
  cr_expect_eq(s.connect_timeout_ms, FERRY__REMOTE_CONNECT_TIMEOUT_MS);
  cr_expect_eq(s.block_bytes, FERRY__BLOCK_BYTES_DEFAULT);
  cr_expect_eq(s.cache_bytes, FERRY__CACHE_DERIVED);
  cr_expect_eq(s.room_wait_ms, FERRY__ROOM_WAIT_MS_DEFAULT);
}

Test(settings, options_reach_their_settings_and_minus_one_is_zero) {
  ferry_source_options o = {.retries = 2,
                            .backoff_ms = -1,
                            .stall_s = 7,
                            .connect_timeout_ms = 500,
                            .block_bytes = 1 << 20,
                            .cache_bytes = -1,
                            .room_wait_ms = -1};
  ferry__source_settings s;
  cr_assert_eq(ferry__source_settings_resolve(&o, &s), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(s.retries, 2);
  cr_expect_eq(s.backoff_ms, 0);
  cr_expect_eq(s.stall_s, 7);
  cr_expect_eq(s.connect_timeout_ms, 500);
  cr_expect_eq(s.block_bytes, 1 << 20);
  cr_expect_eq(s.cache_bytes, 0, "-1: no blocks");
  cr_expect_eq(s.room_wait_ms, 0);
  o = (ferry_source_options){.retries = -1, .cache_bytes = 64 << 20};
  cr_assert_eq(ferry__source_settings_resolve(&o, &s), FERRY_OK);
  cr_expect_eq(s.retries, 0, "-1: no retry");
  cr_expect_eq(s.cache_bytes, 64 << 20);
}

Test(settings, an_option_out_of_range_is_refused_naming_it) {
  ferry__source_settings s;
  ferry_source_options o = {.stall_s = -1};
  cr_expect_eq(ferry__source_settings_resolve(&o, &s), FERRY_EINVAL, "a stall of 0 s is no setting");
  cr_expect(strstr(ferry_last_error(), "config.source.stall_s is -1") != NULL, "%s", ferry_last_error());
  o = (ferry_source_options){.block_bytes = 1024};
  cr_expect_eq(ferry__source_settings_resolve(&o, &s), FERRY_EINVAL);
  cr_expect(strstr(ferry_last_error(), "config.source.block_bytes is 1024") != NULL, "%s", ferry_last_error());
  o = (ferry_source_options){.retries = 1001};
  cr_expect_eq(ferry__source_settings_resolve(&o, &s), FERRY_EINVAL);
}

Test(settings, the_environment_wins_over_the_option) {
  ferry_source_options o = {.retries = 3, .block_bytes = 1 << 20, .cache_bytes = -1};
  setenv("FERRY_REMOTE_RETRIES", "1", 1);
  setenv("FERRY_REMOTE_CACHE_BYTES", "0", 1);
  setenv("FERRY_REMOTE_BLOCK_BYTES", "12", 1); /* out of range: ignored */
  ferry__source_settings s;
  cr_assert_eq(ferry__source_settings_resolve(&o, &s), FERRY_OK);
  cr_expect_eq(s.retries, 1);
  cr_expect_eq(s.cache_bytes, 0);
  cr_expect_eq(s.block_bytes, 1 << 20, "a variable out of range leaves the option");
  setenv("FERRY_REMOTE_CACHE_BYTES", "33554432", 1);
  cr_assert_eq(ferry__source_settings_resolve(NULL, &s), FERRY_OK);
  cr_expect_eq(s.cache_bytes, 32 << 20, "over the derived default too");
}
