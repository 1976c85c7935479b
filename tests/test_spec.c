/*
 * test_spec.c - spec files: every way a spec can be wrong gives one message
 * naming the file, the JSON path, what was found and what is allowed; good
 * specs get their defaults, a canonical form that round-trips and unique
 * entry names; a model expansion's "model" and "skipped" record is validated
 * and otherwise ignored; every shipped configs/kernels/ JSON file parses; truncated and
 * mutated input never crashes the parser (run under ASan too; the random
 * mutations print their seed, LINGEN_SEED replays them).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "family.h"
#include "lingen.h"
#include "spec.h"
#include "testutil.h"

/* A good kernel of each family, to build bad files from. */
#define RQ "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, " \
	   "\"quant\": {}}"
#define RN "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048}"
#define FILE1(k) "{\"kernels\": [" k "]}"
/* rmsnorm_quant with `extra` members after the good ones */
#define RQX(extra) FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", " extra "}")
#define RQH(h) RQX("\"hidden\": " h ", \"quant\": {}")
#define RQQ(q) RQX("\"hidden\": 2048, \"quant\": " q)
#define RNX(extra) FILE1("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", " \
			 "\"hidden\": 2048" extra "}")

#define SKIP(pass) "{\"op\": \"qk_norm_rope\", \"pass\": " pass ", \"why\": \"not yet\"}"

#define RQ_BLOCK64 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", " \
		   "\"hidden\": 2048, \"quant\": {\"block\": 64}}"

struct bad {
	const char *json;
	const char *want[4]; /* substrings of the message, beyond the file name */
};

static const struct bad bad_specs[] = {
	/* syntax */
	{"{\"kernels\": [\n  {\"op\": }\n]}", {"line 2, column 10", "malformed JSON", "found \"}\", allowed: JSON text"}},
	{"{\"kernels\": [" RN "]} trailing", {"line 1, column", "text after the JSON value", "\"trailing\"",
					   "allowed: only whitespace"}},
	{"", {"found an empty document", "allowed: a JSON object"}},
	{"  \n ", {"found an empty document"}},
	{"{\"kernels\": [" RN, {"line 1, column", "malformed JSON"}},
	/* top level */
	{"[" RN "]", {"top level: found an array", "allowed: an object"}},
	{"{\"name\": \"x\"}", {"kernels: missing", "allowed: an array of kernel objects"}},
	{"{\"kernels\": []}", {"kernels: found an empty array", "at least one kernel"}},
	{"{\"kernels\": {}}", {"kernels: found an object", "allowed: an array"}},
	{"{\"kernels\": \"rmsnorm\"}", {"kernels: found \"rmsnorm\"", "allowed: an array"}},
	{"{\"kernels\": [42]}", {"kernels[0]: found 42", "allowed: an object"}},
	{"{\"kernel\": [" RN "]}", {"unknown key \"kernel\"", "allowed keys: name, model, kernels, skipped",
				    "did you mean \"kernels\"?"}},
	{"{\"name\": 7, \"kernels\": [" RN "]}", {"name: found 7 (a number)", "allowed: a string"}},
	{"{\"name\": \"a\", \"name\": \"b\", \"kernels\": [" RN "]}", {"name: duplicate key"}},
	/* kernel keys */
	{FILE1("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hiden\": 2048}"),
	 {"kernels[0]: unknown key \"hiden\"", "allowed keys: op, pass, dtype, hidden, eps, tile",
	  "did you mean \"hidden\"?"}},
	{FILE1("{\"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048}"),
	 {"kernels[0].op: missing", "allowed: \"rmsnorm_quant\", \"rmsnorm\""}},
	{FILE1("{\"op\": \"rmsnorn\", \"pass\": \"forward\"}"),
	 {"kernels[0].op: found \"rmsnorn\"", "allowed: \"rmsnorm_quant\", \"rmsnorm\"",
	  "did you mean \"rmsnorm\"?"}},
	{FILE1("{\"op\": 3}"), {"kernels[0].op: found 3 (a number)", "allowed: \"rmsnorm_quant\""}},
	{FILE1("{\"op\": \"rmsnorm\", \"pass\": \"fwd\", \"dtype\": \"bf16\", \"hidden\": 2048}"),
	 {"kernels[0].pass: found \"fwd\"", "allowed for op rmsnorm: \"forward\", \"backward\""}},
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	       "\"quant\": {}}"),
	 {"kernels[0].pass: found \"backward\"", "allowed for op rmsnorm_quant: \"forward\""}},
	{FILE1("{\"op\": \"rmsnorm\", \"dtype\": \"bf16\", \"hidden\": 2048}"),
	 {"kernels[0].pass: missing", "\"forward\", \"backward\""}},
	{FILE1("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"fp16\", \"hidden\": 2048}"),
	 {"kernels[0].dtype: found \"fp16\"", "allowed for op rmsnorm: \"bf16\""}},
	{FILE1("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"hidden\": 2048}"),
	 {"kernels[0].dtype: found \"fp32\"", "allowed for op rmsnorm: \"bf16\""}},
	{FILE1("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\"}"),
	 {"kernels[0].hidden: missing, required by op rmsnorm", "allowed: a multiple of 8 from 8 to 16384"}},
	{FILE1("{\"op\": \"rmsnorm\", \"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\"}"),
	 {"kernels[0].op: duplicate key"}},
	{RNX(", \"vocab_size\": 157184"), {"kernels[0]: unknown key \"vocab_size\"",
				      "allowed keys: op, pass, dtype, hidden, eps, tile"}},
	{RNX(", \"hidden\": 4096"), {"kernels[0].hidden: duplicate key"}},
	/* dims */
	{RQH("2000"), {"kernels[0].hidden: found 2000", "allowed: a multiple of 128 from 128 to 16384"}},
	{RQH("16512"), {"kernels[0].hidden: found 16512", "allowed: a multiple of 128 from 128 to 16384"}},
	{RQH("0"), {"kernels[0].hidden: found 0", "allowed: a multiple of 128 from 128 to 16384"}},
	{RQH("-128"), {"kernels[0].hidden: found -128", "allowed: a multiple of 128"}},
	{RQH("2048.5"), {"kernels[0].hidden: found 2048.5", "allowed: a multiple of 128"}},
	{RQH("\"2048\""), {"kernels[0].hidden: found \"2048\" (a string)", "allowed: a multiple of 128"}},
	{RQH("99999999999999999999"), {"kernels[0].hidden: found 1e+20", "allowed: a multiple of 128"}},
	{RQH("1e400"), {"kernels[0].hidden: found a number out of range", "allowed: a multiple of 128"}},
	{RQH("true"), {"kernels[0].hidden: found true (a boolean)", "allowed: a multiple of 128"}},
	{RQH("null"), {"kernels[0].hidden: found null (null)", "allowed: a multiple of 128"}},
	/* eps */
	{RNX(", \"eps\": 0"), {"kernels[0].eps: found 0", "allowed: a number strictly between 0 and 1"}},
	{RNX(", \"eps\": -1e-6"), {"kernels[0].eps: found -1e-06", "strictly between 0 and 1"}},
	{RNX(", \"eps\": 1"), {"kernels[0].eps: found 1,", "strictly between 0 and 1"}},
	{RNX(", \"eps\": \"1e-6\""), {"kernels[0].eps: found \"1e-6\" (a string)", "allowed: a number"}},
	/* quant */
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048}"),
	 {"kernels[0].quant: missing, required by op rmsnorm_quant", "format, block, round_scale, output"}},
	{RNX(", \"quant\": {}"), {"kernels[0].quant: found an object, not used by op rmsnorm",
				  "allowed keys: op, pass, dtype, hidden, eps, tile"}},
	{RQQ("[]"), {"kernels[0].quant: found an array", "allowed: an object"}},
	{RQQ("{\"block\": 64}"), {"kernels[0].quant.block: found 64", "allowed: 128"}},
	{RQQ("{\"block\": 0}"), {"kernels[0].quant.block: found 0", "allowed: 128"}},
	{RQQ("{\"format\": \"e5m2\"}"), {"kernels[0].quant.format: found \"e5m2\"", "allowed: \"e4m3\""}},
	{RQQ("{\"output\": \"rows\"}"),
	 {"kernels[0].quant.output: found \"rows\"", "allowed: \"rowwise\", \"columnwise\", \"both\""}},
	{RQQ("{\"round_scale\": \"yes\"}"),
	 {"kernels[0].quant.round_scale: found \"yes\" (a string)", "allowed: true, false"}},
	{RQQ("{\"round_scales\": true}"),
	 {"kernels[0].quant: unknown key \"round_scales\"", "allowed keys: format, block, round_scale, output",
	  "did you mean \"round_scale\"?"}},
	{RQQ("{\"block\": 128, \"block\": 128}"), {"kernels[0].quant.block: duplicate key"}},
	/* tile */
	/* a tile the FP8 GEMM refuses: the keys given as found, the defaults as defaults */
	{"{\"kernels\": [{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 2048, "
	 "\"k\": 2048, \"tile\": {\"n\": 24}}]}",
	 {"tile: found n 24 (with the default m 128, stages 4, cluster 2, ahead 1, epilogue 1, overlap 1); allowed: "}},
	/* tile.m 256: any epilogue, no ahead */
	{"{\"kernels\": [{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 2048, "
	 "\"k\": 2048, \"tile\": {\"m\": 256, \"ahead\": 1}}]}",
	 {"tile: found m 256, ahead 1 (with the default n 128, stages 4, cluster 2, epilogue 0, overlap 0); allowed: "
	  "tile.m 256", "with tile.n up to 128 and no ahead"}},
	/* tile.overlap: one wave a warpgroup */
	{"{\"kernels\": [{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 2048, "
	 "\"k\": 2048, \"tile\": {\"m\": 256, \"overlap\": 1}}]}",
	 {"tile: found m 256, overlap 1 (with the default n 128, stages 4, cluster 2, ahead 0, epilogue 0); allowed: "
	  "tile.overlap with tile.m up to 128"}},
	/* tile.pingpong: a warpgroup's tile of 128 rows in two waves, operands by TMA (not the grouped wgrad's) */
	{"{\"kernels\": [{\"op\": \"fp8_grouped_gemm\", \"pass\": \"wgrad\", \"dtype\": \"bf16\", "
	 "\"experts\": 8, \"n\": 2048, \"k\": 2048, \"tile\": {\"pingpong\": 1}}]}",
	 {"tile: found pingpong 1 (with the default m 128, n 128, stages 4, cluster 1, ahead 0, epilogue 1, "
	  "overlap 0); allowed: tile.pingpong with tile.m 128", "operands by TMA: not the grouped wgrad) or 64"}},
	{"{\"kernels\": [{\"op\": \"fp8_grouped_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
	 "\"experts\": 8, \"n\": 2048, \"k\": 2048, \"tile\": {\"pingpong\": 1, \"m\": 64, \"ahead\": 8}}]}",
	 {"tile: found m 64, ahead 8, pingpong 1", "allowed: tile.pingpong with tile.m 128", "no ahead or overlap"}},
	/* tile.epilogue 3 (half-width buffers): one wave, rows of half the columns 32-byte multiples */
	{"{\"kernels\": [{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 2048, "
	 "\"k\": 2048, \"tile\": {\"m\": 256, \"epilogue\": 3}}]}",
	 {"tile: found m 256, epilogue 3", "allowed: tile.epilogue 3 (half-width buffers) with tile.m up to 128"}},
	{"{\"kernels\": [{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 2048, "
	 "\"k\": 2048, \"tile\": {\"n\": 48, \"ahead\": 0, \"epilogue\": 3}}]}",
	 {"tile: found n 48, ahead 0, epilogue 3", "tile.n a multiple of 32 at bf16"}},
	{"{\"kernels\": [{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 2048, "
	 "\"k\": 2048, \"tile\": {\"epilogue\": 4}}]}",
	 {"kernels[0].tile.epilogue: found 4", "allowed: an integer from 0 to 3"}},
	{RNX(", \"tile\": {\"rowz\": 4}"),
	 {"kernels[0].tile: unknown key \"rowz\"", "allowed keys: rows, threads, prefetch", "did you mean \"rows\"?"}},
	{RNX(", \"tile\": {\"cols\": 256}"),
	 {"kernels[0].tile: unknown key \"cols\"", "allowed keys: rows, threads, prefetch"}},
	{RNX(", \"tile\": {\"prefetch\": 2}"), {"kernels[0].tile.prefetch: found 2", "allowed: an integer from 0 to 1"}},
	{RNX(", \"tile\": {\"rows\": 0}"), {"kernels[0].tile.rows: found 0", "allowed: 1, 2, 4, 8, 16"}},
	{RNX(", \"tile\": {\"threads\": 131072}"), {"kernels[0].tile.threads: found 131072", "allowed: 128, 256, 512, 1024"}},
	{RNX(", \"tile\": 4"), {"kernels[0].tile: found 4", "allowed: an object with keys rows, threads, prefetch"}},
	/* tiles no target can plan: bad input (LG_ERR_SPEC, exit 2) with the path */
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	       "\"quant\": {}, \"tile\": {\"rows\": 3}}"),
	 {"kernels[0].tile.rows: found 3", "allowed: 8, 4, 2, 1"}},
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	       "\"quant\": {}, \"tile\": {\"rows\": 33, \"threads\": 1024}}"),
	 {"kernels[0].tile.rows: found 33", "allowed: 64, 32, 16, 8, 4, 2, 1"}},
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 16384, "
	       "\"quant\": {}, \"tile\": {\"cluster\": 128}}"),
	 {"kernels[0].tile.cluster: found 128", "the fused form takes hidden <= 2048"}},
	/* rmsnorm_quant's forms: cluster 1 or hidden/128, slab a divisor of hidden
	 * of at most 8 CTAs, not both */
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	       "\"quant\": {}, \"tile\": {\"cluster\": 4}}"),
	 {"kernels[0].tile.cluster: found 4", "allowed: 1 (two kernels) or hidden/128 = 16 (fused)"}},
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	       "\"quant\": {}, \"tile\": {\"cluster\": 16, \"slab\": 256}}"),
	 {"kernels[0].tile.slab: found with tile.cluster", "allowed: one of the two"}},
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1152, "
	       "\"quant\": {}, \"tile\": {\"slab\": 256}}"),
	 {"kernels[0].tile.slab: found 256", "allowed: a divisor of hidden = 1152, at least hidden/8"}},
	{FILE1("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 16384, "
	       "\"quant\": {}, \"tile\": {\"slab\": 128}}"),
	 {"kernels[0].tile.slab: found 128", "allowed: a divisor of hidden = 16384, at least hidden/8"}},
	/* the other quantising families (issue 9), with their paths */
	{FILE1("{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	       "\"quant\": {}}"),
	 {"kernels[0].hidden: found 1000", "allowed: a multiple of 128 from 128 to 262144"}},
	{FILE1("{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1024, "
	       "\"quant\": {}, \"tile\": {\"threads\": 128}}"),
	 {"kernels[0].tile.threads: found 128", "allowed: 256, 512"}},
	{FILE1("{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1024, "
	       "\"quant\": {}, \"tile\": {\"fblocks\": 3}}"),
	 {"kernels[0].tile.fblocks: found 3", "allowed: 1, 2, 4, 8"}},
	{FILE1("{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1024, "
	       "\"quant\": {\"output\": \"rowwise\"}}"),
	 {"kernels[0].quant.output: found \"rowwise\"", "allowed: \"both\""}},
	{FILE1("{\"op\": \"swiglu_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"intermediate\": 500, "
	       "\"quant\": {}}"),
	 {"kernels[0].intermediate: found 500", "allowed: a multiple of 128 from 128 to 16384"}},
	{FILE1("{\"op\": \"batch_swiglu_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
	       "\"intermediate\": 1024, \"quant\": {}}"),
	 {"kernels[0].experts: missing, required by op batch_swiglu_quant", "allowed: an integer from 1 to"}},
	{FILE1("{\"op\": \"batch_swiglu_quant\", \"pass\": \"backward\", \"dtype\": \"bf16\", "
	       "\"intermediate\": 1024, \"experts\": 8, \"quant\": {\"output\": \"rowwise\"}}"),
	 {"kernels[0].quant.output: found \"rowwise\" in a backward spec", "allowed: \"both\""}},
	{FILE1("{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 16384, "
	       "\"tile\": {\"rows\": 16}}"),
	 {"kernels[0].tile.rows: found 16", "allowed: 1 to 2"}},
	/* integers JSON cannot hold exactly */
	{FILE1("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 9007199254740993}"),
	 {"kernels[0].hidden: found 9007199254740992 (2^53 or more", "allowed: a multiple of 8"}},
	/* a later kernel gets its own path */
	{"{\"kernels\": [" RN ", " RQ ",\n " RQ_BLOCK64 "]}", {"kernels[2].quant.block: found 64", "allowed: 128"}},
	/* "model" and "skipped": the record of a model expansion */
	{"{\"model\": 1, \"kernels\": [" RN "]}", {"model: found 1 (a number)", "allowed: a string"}},
	{"{\"kernels\": [" RN "], \"skipped\": {}}", {"skipped: found an object",
						       "allowed: an array of {\"op\", \"pass\", \"why\"} objects"}},
	{"{\"kernels\": [" RN "], \"skipped\": [3]}", {"skipped[0]: found 3", "allowed: an object"}},
	{"{\"kernels\": [" RN "], \"skipped\": [" SKIP("\"forward\"") ", {\"op\": \"x\", \"pass\": "
	 "\"forward\"}]}", {"skipped[1].why: missing", "allowed: a string"}},
	{"{\"kernels\": [" RN "], \"skipped\": [" SKIP("\"fwd\"") "]}",
	 {"skipped[0].pass: found \"fwd\"", "allowed: \"forward\", \"backward\""}},
	{"{\"kernels\": [" RN "], \"skipped\": [{\"op\": \"\", \"pass\": \"forward\", \"why\": \"-\"}]}",
	 {"skipped[0].op: found \"\" (a string)", "allowed: a non-empty string"}},
	{"{\"kernels\": [" RN "], \"skipped\": [{\"op\": \"x\", \"pass\": \"forward\", \"why\": \"-\", "
	 "\"hidden\": 1}]}", {"skipped[0]: unknown key \"hidden\"", "allowed keys: op, pass, why"}},
	/* junk */
	{"\"just a string\"", {"top level: found \"just a string\"", "allowed: an object"}},
	/* numbers a kernel would hold as 0 or a denormal fp32 (NVRTC refused
	 * 5e-324f; the values cannot be emitted as they are) */
	{"{\"kernels\": [{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"head_dim\": 128, "
	 "\"q_heads\": 16, \"kv_heads\": 4, \"mscale\": 5e-324}]}",
	 {"kernels[0].mscale: found 5e-324", "fp32's smallest normal"}},
	{"{\"kernels\": [{\"op\": \"qk_norm_rope\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"head_dim\": 128, "
	 "\"q_heads\": 16, \"kv_heads\": 4, \"eps\": 5e-324}]}",
	 {"kernels[0].eps: found 5e-324", "fp32's smallest normal"}},
	{"{\"kernels\": [{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-40}]}", {"kernels[0].eps: found 1e-40", "fp32's smallest normal"}},
	{"{\"kernels\": [{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"vocab\": 50257, "
	 "\"label_smoothing\": 1e-36}]}", {"label_smoothing: found 1e-36", "is not an fp32 normal"}},
	/* a NUL in a string (cJSON would cut the name at it) */
	{"{\"kernels\": [{\"op\": \"rms\\u0000norm\"}]}", {"line 1, column 25: a NUL character", "without NUL"}},
	{"{\"kernels\": [{\"op\": \"rmsnorm\\u0000garbage\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
	 "\"hidden\": 2048}]}", {"column 29: a NUL character (\\u0000) in a string"}},
	{"{\"kernels\": [{\"op\": \"rms\\\\u0000norm\"}]}", {"kernels[0].op: found \"rms\\\\u0000norm\""}},
	{"{\"kernels\": [{\"op\": \"rms\tnorm\"}]}", {"a control character in a string"}},
};


#define FILE_NAME "norms.json"

static void test_bad_specs(void **state)
{
	(void)state;
	size_t n = sizeof bad_specs / sizeof bad_specs[0];
	int failures = 0;
	assert_true(n >= 35);
	for (size_t i = 0; i < n; i++) {
		const struct bad *b = &bad_specs[i];
		lg_spec_file *f = NULL;
		lg_status st = lg_spec_file_parse(b->json, strlen(b->json), FILE_NAME, &f);
		const char *msg = lg_last_error();
		bool ok = st == LG_ERR_SPEC && f == NULL && strncmp(msg, FILE_NAME ": ", 12) == 0;
		for (int w = 0; ok && w < 4 && b->want[w]; w++)
			ok = strstr(msg, b->want[w]) != NULL;
		if (!ok) {
			fprintf(stderr, "bad spec %zu: status %s\n  input:   %s\n  message: %s\n", i,
				lg_status_str(st), b->json, msg);
			for (int w = 0; w < 4 && b->want[w]; w++)
				fprintf(stderr, "  want:    %s\n", b->want[w]);
			failures++;
		}
		lg_spec_file_free(f);
	}
	assert_int_equal(failures, 0);
}

/* Raw NUL and control bytes (cJSON skips them as whitespace) are refused
 * where they are, between tokens as in a string. */
static void test_nul_bytes(void **state)
{
	(void)state;
	static const char spec[] = "{\"kernels\": [" RN "]}";
	const size_t n = sizeof spec - 1;
	lg_spec_file *f = NULL;
	assert_int_equal(lg_spec_file_parse(spec, n, FILE_NAME, &f), LG_OK);
	lg_spec_file_free(f);
	const size_t at[] = {1, 12, n - 1};
	const char bytes[] = {0, 1, 0x1f};
	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
		for (size_t b = 0; b < sizeof bytes; b++) {
			char text[sizeof spec + 1];
			memcpy(text, spec, at[i]);
			text[at[i]] = bytes[b];
			memcpy(text + at[i] + 1, spec + at[i], n - at[i]);
			f = NULL;
			assert_int_equal(lg_spec_file_parse(text, n + 1, FILE_NAME, &f), LG_ERR_SPEC);
			assert_null(f);
			fprintf(stderr, "byte %d at %zu: %s\n", bytes[b], at[i], lg_last_error());
			char want[32];
			snprintf(want, sizeof want, "column %zu: a control character", at[i] + 1);
			assert_non_null(strstr(lg_last_error(), want));
		}
}

static lg_spec *parse_ok(const char *json)
{
	lg_spec *s = NULL;
	lg_status st = lg_spec_parse(json, &s);
	if (st != LG_OK)
		fprintf(stderr, "unexpected error: %s\n", lg_last_error());
	assert_int_equal(st, LG_OK);
	assert_non_null(s);
	return s;
}

static void test_defaults(void **state)
{
	(void)state;
	lg_spec *s = parse_ok(RQ);
	assert_int_equal(s->op, LG_OP_RMSNORM_QUANT);
	assert_int_equal(s->pass, LG_PASS_FORWARD);
	assert_int_equal(s->dtype, LG_DTYPE_BF16);
	const struct lg_family *f = lg_family_get(s->op);
	int hidden = lg_family_key(f, "hidden"), eps = lg_family_key(f, "eps"), tile = lg_family_key(f, "tile");
	assert_true(hidden >= 0 && eps >= 0 && tile >= 0);
	assert_true(lg_spec_has(s, hidden));
	assert_int_equal(lg_spec_int(s, hidden), 2048);
	assert_true(lg_spec_num(s, eps) == 1e-6);
	struct lg_quant q = lg_spec_quant(s);
	assert_true(q.present);
	assert_int_equal(q.format, LG_QFMT_E4M3);
	assert_int_equal(q.block, 128);
	assert_true(q.round_scale);
	assert_int_equal(q.output, LG_QOUT_BOTH);
	for (int k = 0; k < f->nkeys; k++) /* no tile key is set */
		assert_false(lg_key_is_tile(&f->keys[k]) && lg_spec_has(s, k));
	assert_false(lg_spec_has(s, tile));
	lg_spec_free(s);

	/* an empty tile is no tile: the same spec, so tuning still applies */
	lg_spec *e = parse_ok("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			      "\"hidden\": 2048, \"quant\": {}, \"tile\": {}}");
	assert_false(lg_spec_has(e, tile));
	s = parse_ok(RQ);
	char *a = lg_spec_canonical(e), *b = lg_spec_canonical(s);
	assert_string_equal(a, b);
	assert_string_equal(lg_spec_entry(e), lg_spec_entry(s));
	assert_true(memcmp(e->v, s->v, sizeof e->v) == 0 && e->set == s->set);
	free(a);
	free(b);
	lg_spec_free(e);
	lg_spec_free(s);

	s = parse_ok(RN);
	assert_false(lg_spec_quant(s).present);
	assert_true(lg_spec_num(s, lg_family_key(lg_family_get(s->op), "eps")) == 1e-6);
	lg_spec_free(s);
}

struct canon {
	const char *in, *canonical, *entry;
};

static const struct canon canon_cases[] = {
	{RQ,
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-06, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, "
	 "\"output\": \"both\"}}",
	 "lg_rmsnorm_quant_fwd_bf16_h2048_both_pow2"},
	{"{\"quant\": {\"output\": \"columnwise\", \"round_scale\": false}, \"hidden\": 5120, "
	 "\"eps\": 1e-5, \"tile\": {\"threads\": 256}, \"dtype\": \"bf16\", "
	 "\"pass\": \"forward\", \"op\": \"rmsnorm_quant\"}",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 5120, "
	 "\"eps\": 1e-05, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, "
	 "\"output\": \"columnwise\"}, \"tile\": {\"threads\": 256}}",
	 "lg_rmsnorm_quant_fwd_bf16_h5120_colwise_exact_eps1em05_tt256"},
	{"{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 4096.0, "
	 "\"eps\": 0.000001, \"tile\": {\"threads\": 128, \"rows\": 4}}",
	 "{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 4096, "
	 "\"eps\": 1e-06, \"tile\": {\"rows\": 4, \"threads\": 128}}",
	 "lg_rmsnorm_bwd_bf16_h4096_tr4t128"},
	{"{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 128, "
	 "\"eps\": 0.1}",
	 "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 128, "
	 "\"eps\": 0.1}",
	 "lg_rmsnorm_fwd_bf16_h128_eps0p1"},
};

static void test_canonical(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof canon_cases / sizeof canon_cases[0]; i++) {
		const struct canon *c = &canon_cases[i];
		lg_spec *s = parse_ok(c->in);
		char *json = lg_spec_canonical(s);
		assert_non_null(json);
		assert_string_equal(json, c->canonical);
		assert_string_equal(lg_spec_entry(s), c->entry);
		/* the canonical form parses to the same spec */
		lg_spec *again = parse_ok(json);
		char *json2 = lg_spec_canonical(again);
		assert_string_equal(json2, json);
		assert_string_equal(lg_spec_entry(again), lg_spec_entry(s));
		free(json2);
		lg_spec_free(again);
		free(json);
		lg_spec_free(s);
	}
}

static void test_single_kernel_errors(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse("{\"pass\": \"forward\"}", &s), LG_ERR_SPEC);
	assert_null(s);
	assert_non_null(strstr(lg_last_error(), "<input>: op: missing"));
	assert_int_equal(lg_spec_parse("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 100}", &s), LG_ERR_SPEC);
	assert_string_equal(lg_last_error(),
			    "<input>: hidden: found 100, allowed: a multiple of 8 from 8 to 16384");
	assert_int_equal(lg_spec_parse(RQ_BLOCK64, &s), LG_ERR_SPEC);
	assert_string_equal(lg_last_error(), "<input>: quant.block: found 64, allowed: 128");
	assert_int_equal(lg_spec_parse("{\"op\": 1,}", &s), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "<input>: line 1, column 10"));
	assert_int_equal(lg_spec_parse(NULL, &s), LG_ERR_INVALID_ARG);
	/* a success clears the last message */
	s = parse_ok(RN);
	assert_string_equal(lg_last_error(), "");
	lg_spec_free(s);
}

/* A "did you mean" names only a close key or value: at most max(1, len / 3)
 * edits, a swap of two neighbours counting as one; else none. */
static void test_suggestions(void **state)
{
	(void)state;
	static const struct {
		const char *json, *found, *hint; /* hint NULL: no suggestion */
	} cases[] = {
		{RNX(", \"foo\": 1"), "unknown key \"foo\"", NULL},
		{RNX(", \"x\": 1"), "unknown key \"x\"", NULL},
		{RNX(", \"tiles\": {}"), "unknown key \"tiles\"", "tile"},
		{RNX(", \"hiddne\": 1"), "unknown key \"hiddne\"", "hidden"},
		{RNX(", \"tlie\": {}"), "unknown key \"tlie\"", "tile"},
		{FILE1("{\"op\": \"foo\", \"pass\": \"forward\"}"), "op: found \"foo\"", NULL},
		{FILE1("{\"op\": \"rmsnrom\", \"pass\": \"forward\"}"), "op: found \"rmsnrom\"",
		 "rmsnorm"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		lg_spec_file *f = NULL;
		assert_int_equal(lg_spec_file_parse(cases[i].json, strlen(cases[i].json), FILE_NAME, &f),
				 LG_ERR_SPEC);
		const char *msg = lg_last_error();
		char want[64];
		snprintf(want, sizeof want, "(did you mean \"%s\"?)", cases[i].hint ? cases[i].hint : "");
		bool ok = strstr(msg, cases[i].found) &&
			  (cases[i].hint ? strstr(msg, want) != NULL : !strstr(msg, "did you mean"));
		if (!ok)
			fprintf(stderr, "suggestion case %zu: %s\n", i, msg);
		assert_true(ok);
	}
}

static void test_file_api(void **state)
{
	(void)state;
	lg_spec_file *f = NULL;
	const char *text = "{\"name\": \"two\", \"kernels\": [" RN ", " RQ "]}";
	assert_int_equal(lg_spec_file_parse(text, strlen(text), NULL, &f), LG_OK);
	assert_int_equal(lg_spec_file_count(f), 2);
	assert_string_equal(lg_spec_file_name(f), "two");
	assert_int_equal(lg_spec_file_get(f, 1)->op, LG_OP_RMSNORM_QUANT);
	assert_null(lg_spec_file_get(f, 2));
	lg_spec_file_free(f);

	text = "{\"kernels\": [" RN "]}";
	assert_int_equal(lg_spec_file_parse(text, strlen(text), NULL, &f), LG_OK);
	assert_string_equal(lg_spec_file_name(f), "");
	lg_spec_file_free(f);

	/* a model expansion's record is validated and otherwise ignored */
	text = "{\"name\": \"m step\", \"model\": \"m\", \"kernels\": [" RN "], \"skipped\": [" SKIP("\"forward\"")
	       ", " SKIP("\"backward\"") "]}";
	assert_int_equal(lg_spec_file_parse(text, strlen(text), NULL, &f), LG_OK);
	assert_int_equal(lg_spec_file_count(f), 1);
	lg_spec_file_free(f);
	text = "{\"kernels\": [" RN "], \"skipped\": []}";
	assert_int_equal(lg_spec_file_parse(text, strlen(text), NULL, &f), LG_OK);
	lg_spec_file_free(f);

	text = "{\"kernels\": 1}";
	assert_int_equal(lg_spec_file_parse(text, strlen(text), NULL, &f), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "<input>: kernels: found 1"));

	assert_int_equal(lg_spec_file_load(LG_SOURCE_DIR "/configs/kernels/no-such-file.json", &f),
			 LG_ERR_IO);
	assert_null(f);
	assert_non_null(strstr(lg_last_error(), "no-such-file.json: No such file or directory"));
	assert_int_equal(lg_spec_file_load(LG_SOURCE_DIR "/configs/kernels", &f), LG_ERR_IO);
	assert_non_null(strstr(lg_last_error(), "configs/kernels: Is a directory"));
}

static bool is_identifier(const char *s)
{
	if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

#define MAX_SPECS 256

static void test_shipped_configs(void **state)
{
	(void)state;
	size_t nfiles = 0, n = 0;
	char **files = lg_test_list_dir(LG_SOURCE_DIR "/configs/kernels", ".json", &nfiles);
	assert_non_null(files);
	assert_true(nfiles >= 2);
	char *canon[MAX_SPECS];
	const char *entry[MAX_SPECS];
	lg_spec_file *loaded[32] = {0};
	assert_true(nfiles <= 32);
	for (size_t i = 0; i < nfiles; i++) {
		lg_status st = lg_spec_file_load(files[i], &loaded[i]);
		if (st != LG_OK)
			fprintf(stderr, "%s\n", lg_last_error());
		assert_int_equal(st, LG_OK);
		assert_true(lg_spec_file_count(loaded[i]) > 0);
		assert_true(strlen(lg_spec_file_name(loaded[i])) > 0);
		for (size_t k = 0; k < lg_spec_file_count(loaded[i]); k++, n++) {
			const lg_spec *s = lg_spec_file_get(loaded[i], k);
			assert_true(n < MAX_SPECS);
			canon[n] = lg_spec_canonical(s);
			entry[n] = lg_spec_entry(s);
			assert_non_null(canon[n]);
			assert_true(is_identifier(entry[n]));
			assert_true(strlen(entry[n]) < 120);
			lg_spec *again = parse_ok(canon[n]);
			char *c2 = lg_spec_canonical(again);
			assert_string_equal(c2, canon[n]);
			free(c2);
			lg_spec_free(again);
		}
	}
	/* one entry name per distinct canonical spec */
	for (size_t a = 0; a < n; a++)
		for (size_t b = a + 1; b < n; b++)
			assert_int_equal(strcmp(canon[a], canon[b]) == 0,
					 strcmp(entry[a], entry[b]) == 0);
	assert_true(n >= 14);
	for (size_t a = 0; a < n; a++)
		free(canon[a]);
	for (size_t i = 0; i < nfiles; i++)
		lg_spec_file_free(loaded[i]);
	lg_test_free_list(files);
}

static void test_long_entry_is_hashed(void **state)
{
	(void)state;
	/* every key of the family set to a long value: a name past 120 characters */
	struct lg_spec s = {.op = LG_OP_RMSNORM_QUANT, .pass = LG_PASS_FORWARD, .dtype = LG_DTYPE_BF16,
			    .fam = lg_family_get(LG_OP_RMSNORM_QUANT)};
	const struct lg_family *f = s.fam;
	for (int k = 0; k < f->nkeys; k++) {
		enum lg_key_type t = f->keys[k].type;
		s.v[k] = t == LG_KEY_INT ? ((int64_t)1 << 53) - k : 0;
		s.num[k] = 0.25;
		s.set |= (uint64_t)1 << k;
	}
	lg_spec_make_entry(&s);
	assert_true(strlen(s.entry) < 120);
	assert_true(is_identifier(s.entry));
	assert_non_null(strstr(s.entry, "lg_rmsnorm_quant_fwd_bf16_x"));
	char first[128];
	memcpy(first, s.entry, sizeof first);
	s.v[lg_family_key(f, "tile.stages")]++;
	lg_spec_make_entry(&s);
	assert_string_not_equal(first, s.entry);
}

/* Parse text[0..len) from a buffer of exactly len bytes, so ASan sees any
 * read past the end; the parser may only succeed or report a spec error. */
static void parse_exact(const char *text, size_t len)
{
	char *copy = malloc(len ? len : 1);
	assert_non_null(copy);
	memcpy(copy, text, len);
	lg_spec_file *f = NULL;
	lg_status st = lg_spec_file_parse(copy, len, "fuzz.json", &f);
	assert_true(st == LG_OK || st == LG_ERR_SPEC);
	assert_true((st == LG_OK) == (f != NULL));
	if (st == LG_ERR_SPEC)
		assert_non_null(strstr(lg_last_error(), "fuzz.json: "));
	lg_spec_file_free(f);
	free(copy);
}

static void test_fuzz(void **state)
{
	(void)state;
	static const char subst[] = {'\0', '"', '{', '}', '[', ']', ',', ':', '9', '-', 'e',
				     '.', ' ', 'x', '\\', (char)0xff, '\n'};
	size_t len = 0;
	char *text = lg_test_read_file(LG_SOURCE_DIR "/configs/kernels/ling-mini-2.0-norms.json", &len);
	assert_non_null(text);
	for (size_t i = 0; i <= len; i++)
		parse_exact(text, i);
	for (size_t i = 0; i < len; i++) {
		char keep = text[i];
		for (size_t k = 0; k < sizeof subst; k++) {
			text[i] = subst[k];
			parse_exact(text, len);
		}
		text[i] = keep;
	}
	/* random mutations of several bytes at once, cut at a random length */
	uint64_t rng = lg_test_seed("test_spec test_fuzz");
	char *copy = malloc(len + 1);
	assert_non_null(copy);
	for (int round = 0; round < 20000; round++) {
		memcpy(copy, text, len);
		lg_test_mutate(copy, len, &rng);
		parse_exact(copy, lg_test_rand(&rng) % 4 ? len : (size_t)(lg_test_rand(&rng) % (len + 1)));
	}
	free(copy);
	free(text);

	/* single kernels, truncated (lg_spec_parse reads up to the NUL) */
	const char *one = RQ;
	for (size_t i = 0; i <= strlen(one); i++) {
		char *cut = strndup(one, i);
		lg_spec *s = NULL;
		lg_status st = lg_spec_parse(cut, &s);
		assert_true(st == LG_OK || st == LG_ERR_SPEC);
		assert_true(st != LG_ERR_SPEC || strncmp(lg_last_error(), "<input>: ", 9) == 0);
		lg_spec_free(s);
		free(cut);
	}

	/* deep nesting, in the kernels array and at the top */
	size_t deep = 100000;
	char *junk = malloc(2 * deep + 32);
	assert_non_null(junk);
	size_t n = (size_t)sprintf(junk, "{\"kernels\": ");
	memset(junk + n, '[', deep);
	memset(junk + n + deep, ']', deep);
	parse_exact(junk, n + 2 * deep);
	memset(junk, '{', deep);
	parse_exact(junk, deep);
	free(junk);

	/* many keys in one object */
	size_t keys = 20000, cap = keys * 16 + 32, o = 0;
	char *many = malloc(cap);
	assert_non_null(many);
	o += (size_t)snprintf(many + o, cap - o, "{\"kernels\": [{\"op\": \"rmsnorm\"");
	for (size_t i = 0; i < keys; i++)
		o += (size_t)snprintf(many + o, cap - o, ", \"tile\": %zu", i);
	o += (size_t)snprintf(many + o, cap - o, "}]}");
	parse_exact(many, o);
	free(many);
}

/* Messages are per thread: two threads failing differently keep their own. */
static void *parse_in_thread(void *arg)
{
	const char *h = arg;
	char json[256], want[64];
	snprintf(json, sizeof json, "{\"kernels\": [" RN ", {\"op\": \"rmsnorm\", \"pass\": \"forward\", "
		 "\"dtype\": \"bf16\", \"hidden\": %s}]}", h);
	snprintf(want, sizeof want, "t.json: kernels[1].hidden: found %s,", h);
	for (int i = 0; i < 2000; i++) {
		lg_spec_file *f = NULL;
		if (lg_spec_file_parse(json, strlen(json), "t.json", &f) != LG_ERR_SPEC ||
		    strncmp(lg_last_error(), want, strlen(want)) != 0)
			return (void *)1;
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	static const char *const hs[] = {"100", "201", "300", "401"}; /* none a multiple of 8 */
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, parse_in_thread, (void *)hs[i]), 0);
	for (int i = 0; i < 4; i++) {
		void *bad = NULL;
		assert_int_equal(pthread_join(t[i], &bad), 0);
		assert_null(bad);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_specs),
		cmocka_unit_test(test_nul_bytes),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_canonical),
		cmocka_unit_test(test_single_kernel_errors),
		cmocka_unit_test(test_suggestions),
		cmocka_unit_test(test_file_api),
		cmocka_unit_test(test_shipped_configs),
		cmocka_unit_test(test_long_entry_is_hashed),
		cmocka_unit_test(test_fuzz),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
