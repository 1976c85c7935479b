/*
 * fuzz_common.c - the spec round trip the harnesses share (fuzz.h).
 */
#include <string.h>

#include "family.h"
#include "fuzz.h"
#include "generate.h"

void lg_fuzz_spec_roundtrip(const lg_spec *s)
{
	char *canon = lg_spec_canonical(s);
	LG_FUZZ_CHECK(canon != NULL);
	lg_spec *back = NULL;
	LG_FUZZ_CHECK(lg_spec_parse(canon, &back) == LG_OK);
	char *again = lg_spec_canonical(back);
	LG_FUZZ_CHECK(again && strcmp(canon, again) == 0);
	LG_FUZZ_CHECK(strcmp(lg_spec_entry(s), lg_spec_entry(back)) == 0);
	struct lg_target t;
	struct lg_plan p;
	LG_FUZZ_CHECK(lg_target_parse("sm_90a", &t));
	lg_status st = lg_plan_for(back, &t, &p);
	LG_FUZZ_CHECK(st == LG_OK || st == LG_ERR_UNSUPPORTED);
	free(again);
	free(canon);
	lg_spec_free(back);
}
