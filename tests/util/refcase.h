/*
 * refcase.h - spec and reference-case helpers the CPU and GPU tests share:
 * a spec from its op, pass, dtype and keys (or the check that one is
 * refused, and why), planning it for a target, and freeing a reference
 * case's host buffers.
 */
#ifndef LG_REFCASE_H
#define LG_REFCASE_H

#include "family.h"
#include "ref.h"

/* The spec {"op": op, "pass": pass, "dtype": dtype, <keys>}; a parse
 * error fails the test (cmocka), naming the JSON and the library's error.
 * The caller frees it with lg_spec_free(). */
lg_spec *lg_test_spec(const char *op, const char *pass, const char *dtype, const char *keys);

/* The same JSON text; the caller frees it with free(). */
char *lg_test_spec_json(const char *op, const char *pass, const char *dtype, const char *keys);

/* cmocka assertion: json is refused as a spec (LG_ERR_SPEC) with a message
 * holding both want1 and want2. what names the case in a failure. */
void lg_test_refused(const char *json, const char *what, const char *want1, const char *want2);

/* Free the host buffers and slacks of a case (lg_ref_case_init's buffers
 * filled by the test); the case itself is the caller's. */
void lg_test_case_free(struct lg_ref_case *c);

/* cmocka assertion: s plans for arch (a target name, "sm_90a") with
 * status want; *p is the plan (zeroed first). */
void lg_test_plan(const lg_spec *s, const char *arch, struct lg_plan *p, lg_status want);

#endif
