#!/usr/bin/env python3
"""Check that every public function in ferry's headers has a doc comment.

    check_header_docs.py [DIR_OR_HEADER...]   (default: the include/ferry of this tree)
    check_header_docs.py --self-test

The headers are ferry's reference documentation, so every function declared in
include/ferry/*.h must say what it is for. A declaration counts as documented when:
  - a comment ends on the line directly above it (no blank line in between), or
  - a comment follows it on its own last line (`void f(void); /* ... */`), or
  - it directly follows (no blank line) a documented declaration: a group of related
    functions under one comment, such as a getter pair, or a callback typedef and the
    function that takes it.
The comment must say something: at least three words (a bare section label such as
"/* Accounting. */" does not count).

Prints each undocumented function as FILE:LINE: NAME and exits 1 if there is any;
exits 1 too when no function is found at all, since that means the parser is wrong.
"""
import os
import re
import sys

# A function declaration at file scope: return type, then a ferry_ name, then "(".
# Function-pointer typedefs ("typedef void (*ferry_x_fn)(...)") are types, not functions.
DECL_START = re.compile(r"^(?!typedef\b)(?:static\s+inline\s+|extern\s+)?[A-Za-z_][\w\s\*]*?\b(ferry_\w+)\s*\(")
WORD = re.compile(r"[A-Za-z]{2,}")


def strip_comments(lines):
    """Per line: the code with comments blanked, and whether a comment ends on it,
    with that comment's text (joined over its lines)."""
    code, ends = [], {}
    in_comment, text = False, []
    for i, line in enumerate(lines):
        out, j = [], 0
        while j < len(line):
            if in_comment:
                k = line.find("*/", j)
                if k < 0:
                    text.append(line[j:])
                    j = len(line)
                else:
                    text.append(line[j:k])
                    ends[i] = " ".join(text)
                    in_comment, text = False, []
                    j = k + 2
            elif line.startswith("/*", j):
                in_comment, j = True, j + 2
            elif line.startswith("//", j):
                ends[i] = line[j + 2:]
                j = len(line)
            else:
                out.append(line[j])
                j += 1
        code.append("".join(out))
    return code, ends


def substantive(comment):
    return len(WORD.findall(comment)) >= 3


def declarations(code):
    """(first_line, last_line, name) of each function declaration at file scope."""
    found, depth, i = [], 0, 0
    while i < len(code):
        line = code[i]
        if depth == 0 and not line.lstrip().startswith("#"):
            m = DECL_START.match(line)
            if m:
                j = i
                while ";" not in code[j] and "{" not in code[j] and j + 1 < len(code):
                    j += 1
                found.append((i, j, m.group(1)))
                if "{" in code[j]:  # an inline definition: skip its body
                    depth = code[j].count("{") - code[j].count("}")
                    i = j + 1
                    while depth > 0 and i < len(code):
                        depth += code[i].count("{") - code[i].count("}")
                        i += 1
                    continue
                i = j + 1
                continue
        i += 1
    return found


def typedefs(code):
    """(first_line, last_line, None) of each typedef without a body (a struct's or
    enum's body would not end on a line of its own with ';')."""
    found = []
    for i, line in enumerate(code):
        if not line.startswith("typedef"):
            continue
        j = i
        while ";" not in code[j] and "{" not in code[j] and j + 1 < len(code):
            j += 1
        if "{" not in code[j]:
            found.append((i, j, None))
    return found


def undocumented(text):
    """Names (with 1-based line numbers) of the functions in `text` without a doc comment."""
    lines = text.split("\n")
    code, ends = strip_comments(lines)
    decls = declarations(code)
    documented_end = set()  # last lines of documented declarations

    def has_doc(first, last):
        above = first - 1
        return ((above in ends and substantive(ends[above]) and not code[above].strip())
                or (last in ends and substantive(ends[last]))
                or above in documented_end)

    # One-line typedefs (callback types) can carry a group's comment on to a function.
    items = typedefs(code)
    missing = []
    for first, last, name in sorted(items + decls):
        if has_doc(first, last):
            documented_end.add(last)
        elif name:
            missing.append((first + 1, name))
    return len(decls), missing


def headers(args):
    for arg in args:
        if os.path.isdir(arg):
            for name in sorted(os.listdir(arg)):
                if name.endswith(".h"):
                    yield os.path.join(arg, name)
        else:
            yield arg


def self_test():
    sample = """
/* ferry/x.h - a header. */
#define FERRY_X 1
typedef void (*ferry_cb_fn)(void *user);

/* Opens a thing by name. */
int ferry_open(const char *name,
               void **out);
int ferry_open_again(void);

int ferry_bare(void);
/* Accounting. */
int ferry_labelled_only(void);
void ferry_trailing(void); /* frees the thing and its buffers */
/* Read the size
 * of the thing in bytes. */
static inline int ferry_inline(int x) {
  return x + 1;
}

// Counts the things that exist.
int ferry_slashes(void);

/* Call fn for every thing there is. */
typedef void (*ferry_each_fn)(void *thing);
int ferry_each(ferry_each_fn fn);

typedef void (*ferry_undoc_fn)(void *thing);
int ferry_after_undocumented_typedef(ferry_undoc_fn fn);

/* A visitor: return nonzero to stop. */
typedef int (*ferry_visit_fn)(void *thing,
                              void *user);
int ferry_visit(ferry_visit_fn fn, void *user);
"""
    count, missing = undocumented(sample)
    names = [n for _, n in missing]
    expect = ["ferry_bare", "ferry_labelled_only", "ferry_after_undocumented_typedef"]
    if count != 10 or names != expect:
        print(f"self-test FAILED: {count} declarations, undocumented {names}, expected 10 and {expect}")
        return 1
    print(f"self-test passed: {count} declarations found, the {len(expect)} undocumented ones reported")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    args = argv[1:] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "ferry")]
    total, bad = 0, 0
    for path in headers(args):
        with open(path, encoding="utf-8") as f:
            count, missing = undocumented(f.read())
        total += count
        for line, name in missing:
            print(f"{path}:{line}: {name} has no doc comment directly above it")
            bad += 1
    if total == 0:
        print("no function declarations found: is the path right?")
        return 1
    print(f"{total} public functions, {bad} without a doc comment")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
