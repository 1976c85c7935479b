/*
 * test_model.c - model configs (configs/models/): every shipped model
 * parses, expands, and its expansion reads back as a spec file; the
 * ling-mini-2.0 step is exactly the expected kernels (canonical JSON, each
 * once) and skips every family not implemented yet, by op and pass; every
 * way a config can be wrong gives one message naming the file, the JSON
 * path, what was found and what is allowed; truncated and mutated configs
 * never crash (the random mutations print their seed, LINGEN_SEED replays).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "lingen.h"
#include "family.h" /* lg_family.target_only */
#include "model.h"
#include "spec.h"
#include "testutil.h"

#define MODELS LG_SOURCE_DIR "/configs/models"
#define LING_MINI MODELS "/ling-mini-2.0.json"

/* Parse and expand a shipped config, asserting success. */
static void load_model(const char *path, struct lg_model *m, struct lg_model_step *s)
{
	size_t len = 0;
	char *text = lg_test_read_file(path, &len);
	assert_non_null(text);
	lg_status st = lg_model_parse(text, len, path, m);
	if (st == LG_OK)
		st = lg_model_expand(m, path, s);
	if (st != LG_OK)
		fprintf(stderr, "%s\n", lg_last_error());
	assert_int_equal(st, LG_OK);
	assert_true(lg_model_is_config(text, len));
	free(text);
}

static bool op_registered(const char *op)
{
	for (int i = 0; i < LG_OP_COUNT; i++)
		if (strcmp(lg_op_names[i], op) == 0)
			return true;
	return false;
}

static void test_shipped_models(void **state)
{
	(void)state;
	size_t n = 0;
	char **files = lg_test_list_dir(MODELS, ".json", &n);
	assert_non_null(files);
	assert_true(n >= 4);
	struct lg_model_step *s = malloc(sizeof *s);
	assert_non_null(s);
	for (size_t i = 0; i < n; i++) {
		struct lg_model m;
		load_model(files[i], &m, s);
		/* the file is named after the model */
		const char *base = strrchr(files[i], '/') + 1;
		assert_int_equal(strlen(base), strlen(m.name) + 5);
		assert_memory_equal(base, m.name, strlen(m.name));
		assert_true(m.fp8.present);
		assert_true(s->nkernels >= 3);
		for (size_t k = 0; k < s->nkernels; k++)
			assert_true(op_registered(lg_op_names[s->kernels[k].op]));
		for (size_t k = 0; k < s->nskipped; k++) { /* a family, or a pass of one, not there yet */
			bool fam = op_registered(s->skipped[k].op);
			assert_non_null(strstr(s->skipped[k].why, fam ? "pass not implemented" : "docs/kernels.md K"));
		}

		/* the expansion reads back as a spec file with the same kernels */
		char *json = lg_model_step_json(&m, s);
		assert_non_null(json);
		lg_spec_file *f = NULL;
		lg_status st = lg_spec_file_parse(json, strlen(json), files[i], &f);
		if (st != LG_OK)
			fprintf(stderr, "%s\n%s\n", lg_last_error(), json);
		assert_int_equal(st, LG_OK);
		assert_int_equal(lg_spec_file_count(f), s->nkernels);
		char want[96];
		snprintf(want, sizeof want, "%s training step", m.name);
		assert_string_equal(lg_spec_file_name(f), want);
		for (size_t k = 0; k < s->nkernels; k++) {
			char *a = lg_spec_canonical(lg_spec_file_get(f, k));
			char *b = lg_spec_canonical(&s->kernels[k]);
			assert_string_equal(a, b);
			/* each kernel once */
			for (size_t j = 0; j < k; j++) {
				char *c = lg_spec_canonical(&s->kernels[j]);
				assert_string_not_equal(c, b);
				free(c);
			}
			free(a);
			free(b);
		}
		lg_spec_file_free(f);

		/* the public calls give the same text */
		char *pub = NULL;
		assert_int_equal(lg_model_expand_file(files[i], &pub), LG_OK);
		assert_string_equal(pub, json);
		free(pub);
		free(json);
	}
	free(s);
	lg_test_free_list(files);
}

/* The canonical specs the ling-mini-2.0 step expands to, one a line:
 * tests/golden/expand/ling-mini-2.0.txt (LINGEN_UPDATE_GOLDEN=1 rewrites it). */
#define MINI_KERNELS LG_SOURCE_DIR "/tests/golden/expand/ling-mini-2.0.txt"


/* The step's kernels, canonical, one a line, are the text of file (with
 * LINGEN_UPDATE_GOLDEN=1: written there, then compared). */
static void check_step_kernels(const struct lg_model_step *s, const char *file)
{
	size_t len = 0, cap = 4096;
	char *got = malloc(cap);
	assert_non_null(got);
	got[0] = '\0';
	for (size_t i = 0; i < s->nkernels; i++) {
		char *c = lg_spec_canonical(&s->kernels[i]);
		assert_non_null(c);
		size_t n = strlen(c);
		while (len + n + 2 > cap)
			assert_non_null(got = realloc(got, cap *= 2));
		memcpy(got + len, c, n);
		len += n;
		got[len++] = '\n';
		got[len] = '\0';
		free(c);
	}
	const char *up = getenv("LINGEN_UPDATE_GOLDEN");
	if (up && strcmp(up, "1") == 0)
		lg_test_write_file(file, got, len);
	char *want = lg_test_read_file(file, NULL);
	if (strcmp(got, want) != 0)
		fail_msg("the step's kernels differ from %s (LINGEN_UPDATE_GOLDEN=1 rewrites it):\n%s", file, got);
	free(want);
	free(got);
}

static void test_ling_mini(void **state)
{
	(void)state;
	struct lg_model m;
	struct lg_model_step *s = malloc(sizeof *s);
	assert_non_null(s);
	load_model(LING_MINI, &m, s);
	assert_string_equal(m.name, "ling-mini-2.0");
	static const int64_t want[LG_MK_COUNT] = {
		[LG_MK_HIDDEN] = 2048, [LG_MK_LAYERS] = 20, [LG_MK_Q_HEADS] = 16,
		[LG_MK_KV_HEADS] = 4, [LG_MK_HEAD_DIM] = 128, [LG_MK_EXPERTS] = 256,
		[LG_MK_TOPK] = 8, [LG_MK_EXPERT_INTERMEDIATE] = 512, [LG_MK_SHARED_EXPERTS] = 1,
		[LG_MK_SHARED_INTERMEDIATE] = 512, [LG_MK_VOCAB] = 157184,
	};
	for (int i = 0; i < LG_MK_COUNT; i++)
		assert_int_equal(m.v[i], want[i]);
	assert_true(m.eps == 1e-6);
	assert_true(m.fp8.round_scale);
	assert_int_equal(m.fp8.block, 128);

	check_step_kernels(s, MINI_KERNELS);
	assert_int_equal(s->nskipped, 0); /* every kernel of the step exists, the grouped wgrad too */

	/* the spec file text: model name, 2-space indent, one kernel a line */
	char *json = lg_model_step_json(&m, s);
	assert_non_null(json);
	assert_non_null(strstr(json, "{\n  \"name\": \"ling-mini-2.0 training step\",\n"
				     "  \"model\": \"ling-mini-2.0\",\n  \"kernels\": [\n    {"));
	assert_null(strstr(json, "\"why\"")); /* nothing skipped */
	assert_int_equal(json[strlen(json) - 1], '\n');
	cJSON *j = cJSON_Parse(json);
	assert_non_null(j);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "skipped")), 0);
	cJSON_Delete(j);
	free(json);
	free(s);
}

/* Restricted to sm_80 (and sm_90a): the FP8 GEMMs (sm_90a only) are
 * skipped for sm_80 with the arch and reason, once per op, pass and arch,
 * and dropped only when no arch runs them; the text parses as a spec file. */
static void test_for_archs(void **state)
{
	(void)state;
	struct lg_model m;
	struct lg_model_step *s = malloc(sizeof *s);
	assert_non_null(s);
	char a90[] = "sm_90a", a80[] = "sm_80";
	char *both[] = {a90, a80}, *one[] = {a80};
	load_model(LING_MINI, &m, s);
	size_t all = s->nkernels;
	lg_model_step_for_archs(s, both, 2);
	assert_int_equal(s->nkernels, all);
	assert_int_equal(s->nskipped, 6); /* 2 families x forward, dgrad, wgrad */
	for (size_t i = 0; i < s->nskipped; i++) {
		assert_string_equal(s->skipped[i].arch, "sm_80");
		assert_string_equal(s->skipped[i].only, "sm_90a");
		assert_true(strncmp(s->skipped[i].op, "fp8_", 4) == 0);
	}
	load_model(LING_MINI, &m, s);
	lg_model_step_for_archs(s, one, 1);
	assert_int_equal(s->nkernels, all - 18);
	assert_int_equal(s->nskipped, 6);
	for (size_t i = 0; i < s->nkernels; i++)
		assert_null(s->kernels[i].fam->target_only);
	char *json = lg_model_step_json(&m, s);
	assert_non_null(json);
	assert_non_null(strstr(json, "{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"arch\": \"sm_80\", "
				     "\"why\": \"family runs on sm_90a only\"}"));
	lg_spec_file *f = NULL;
	assert_int_equal(lg_spec_file_parse(json, strlen(json), "step.json", &f), LG_OK);
	assert_int_equal(lg_spec_file_count(f), all - 18);
	lg_spec_file_free(f);
	free(json);
	free(s);
}

/* A model without a shared expert skips no shared-expert kernel. */
static void test_no_shared_expert(void **state)
{
	(void)state;
	struct lg_model m;
	struct lg_model_step *s = malloc(sizeof *s);
	assert_non_null(s);
	load_model(MODELS "/qwen3-30b-a3b.json", &m, s);
	assert_int_equal(m.v[LG_MK_SHARED_EXPERTS], 0);
	/* RoPE over the whole head: the K2 kernels take rotary_fraction 1 */
	assert_true(m.rotary_fraction == 1.0);
	int rope = 0;
	for (size_t i = 0; i < s->nkernels; i++) {
		assert_int_not_equal(s->kernels[i].op, LG_OP_SWIGLU_QUANT); /* no shared expert */
		char *c = lg_spec_canonical(&s->kernels[i]);
		if (strstr(c, "\"op\": \"qk_norm_rope\"")) {
			assert_non_null(strstr(c, "\"q_heads\": 32, \"kv_heads\": 4, \"rotary_fraction\": 1,"));
			rope++;
		}
		free(c);
	}
	assert_int_equal(rope, 2);
	assert_int_equal(s->nskipped, 0); /* every kernel, the grouped wgrad too */
	free(s);
}

/* fused_router: the MoE input's norm and the router's forward become one
 * rmsnorm_router kernel (both copies, the model's eps and recipe); the
 * router's backward stays; absent or false: router_gemm's forward, no
 * rmsnorm_router. */
static char *mutate(const char *key, const char *value);
static void test_fused_router(void **state)
{
	(void)state;
	for (int fused = 0; fused < 3; fused++) {
		char *text = mutate("fused_router", fused == 2 ? NULL : fused ? "true" : "false");
		char *json = NULL;
		if (lg_model_expand_text(text, strlen(text), "m.json", &json) != LG_OK)
			fail_msg("%s", lg_last_error());
		const bool on = fused == 1;
		const char *k3b = strstr(json, "\"op\": \"rmsnorm_router\", \"pass\": \"forward\"");
		assert_true(on ? k3b != NULL : k3b == NULL);
		if (on)
			assert_non_null(strstr(k3b, "\"hidden\": 2048, \"experts\": 256, \"eps\": 1e-06"));
		if (on)
			assert_non_null(strstr(k3b, "\"output\": \"both\""));
		assert_true(on == !strstr(json, "\"op\": \"router_gemm\", \"pass\": \"forward\""));
		assert_non_null(strstr(json, "\"op\": \"router_gemm\", \"pass\": \"backward\""));
		assert_non_null(strstr(json, "\"op\": \"rmsnorm_quant\", \"pass\": \"forward\""));
		free(json);
		free(text);
	}
}

/* head_layout: the K2 kernels (both passes) take the model's, "interleaved"
 * when absent (Megatron's GQA groups), "plain" when the config says so. */
static void test_head_layout(void **state)
{
	(void)state;
	static const char *const values[] = {NULL, "\"interleaved\"", "\"plain\""};
	for (int i = 0; i < 3; i++) {
		char *text = mutate("head_layout", values[i]);
		char *json = NULL;
		if (lg_model_expand_text(text, strlen(text), "m.json", &json) != LG_OK)
			fail_msg("%s", lg_last_error());
		const char *want = i == 2 ? "\"head_layout\": \"plain\"" : "\"head_layout\": \"interleaved\"";
		int rope = 0;
		for (const char *k = strstr(json, "\"op\": \"qk_norm_rope\""); k;
		     k = strstr(k + 1, "\"op\": \"qk_norm_rope\"")) {
			const char *end = strchr(k, '}');
			const char *h = strstr(k, want);
			assert_true(end && h && h < end);
			rope++;
		}
		assert_int_equal(rope, 2);
		free(json);
		free(text);
	}
}

/* ------------------------------------------------------- bad configs */

/* The ling-mini config with one member replaced by `value` (raw JSON),
 * added if absent, removed when value is NULL. */
static char *mutate(const char *key, const char *value)
{
	char *text = lg_test_read_file(LING_MINI, NULL);
	assert_non_null(text);
	cJSON *root = cJSON_Parse(text);
	assert_non_null(root);
	free(text);
	cJSON_DeleteItemFromObjectCaseSensitive(root, key);
	if (value) {
		cJSON *v = cJSON_Parse(value);
		assert_non_null(v);
		cJSON_AddItemToObject(root, key, v);
	}
	char *out = cJSON_Print(root);
	assert_non_null(out);
	cJSON_Delete(root);
	return out;
}

#define FP8(f, b, r) "{\"format\": " f ", \"block\": " b ", \"round_scale\": " r "}"

struct bad {
	const char *key, *value; /* mutate(key, value), or */
	const char *raw;         /* the whole text when key is NULL */
	const char *want[4];     /* substrings of the message, beyond "m.json: " */
};

static const struct bad bad_models[] = {
	{"hiden", "2048", NULL, {"unknown key \"hiden\"", "allowed keys: name, source, notes, hidden",
				 "did you mean \"hidden\"?"}},
	{"hidden", NULL, NULL, {"m.json: hidden: missing", "allowed: an integer from 1 to 1048576"}},
	{"hidden", "2000", NULL, {"m.json: hidden: found 2000", "allowed: a multiple of 128 from 128 to 16384",
				  "(needed by kernel rmsnorm_quant forward of the training step)"}},
	{"hidden", "32768", NULL, {"m.json: hidden: found 32768", "allowed: a multiple of 128",
				   "needed by kernel rmsnorm_quant forward"}},
	{"hidden", "\"2048\"", NULL, {"m.json: hidden: found \"2048\" (a string)", "allowed: an integer"}},
	{"experts", "-1", NULL, {"m.json: experts: found -1", "allowed: an integer from 1 to 65536"}},
	{"topk", "300", NULL, {"m.json: topk: found 300", "allowed: an integer from 1 to experts (256)"}},
	{"kv_heads", "3", NULL, {"m.json: kv_heads: found 3", "allowed: a divisor of q_heads (16)"}},
	{"vocab", "1.5", NULL, {"m.json: vocab: found 1.5", "allowed: an integer"}},
	{"layers", "0", NULL, {"m.json: layers: found 0", "allowed: an integer from 1 to 100000"}},
	{"shared_intermediate", "0", NULL, {"m.json: shared_intermediate: found 0",
					    "when shared_experts is 1"}},
	{"shared_experts", "0", NULL, {"m.json: shared_intermediate: found 512",
				       "allowed: 0 when shared_experts is 0"}},
	{"eps", "0", NULL, {"m.json: eps: found 0", "allowed: a number greater than 0 and less than 1"}},
	{"eps", NULL, NULL, {"m.json: eps: missing", "rms_norm_eps"}},
	/* 0 in fp32: expand refuses it as build would have failed */
	{"eps", "5e-324", NULL, {"m.json: eps: found 5e-324", "fp32's smallest normal"}},
	{"eps", "1e-39", NULL, {"m.json: eps: found 1e-39", "fp32's smallest normal"}},
	{"rotary_fraction", "1.5", NULL, {"m.json: rotary_fraction: found 1.5",
					  "allowed: a number greater than 0 and at most 1"}},
	{"rotary_fraction", "0.3", NULL, {"m.json: rotary_fraction: found 0.3",
					  "a multiple of 16", "needed by kernel qk_norm_rope forward"}},
	{"head_dim", "96", NULL, {"m.json: head_dim: found 96", "allowed: 64, 128, 256",
				  "needed by kernel qk_norm_rope forward"}},
	{"name", "\"ling mini\"", NULL, {"m.json: name: found \"ling mini\"",
					 "allowed: 1 to 63 characters from A-Z a-z 0-9 . _ -"}},
	{"name", "7", NULL, {"m.json: name: found 7 (a number)", "allowed: 1 to 63 characters"}},
	{"source", NULL, NULL, {"m.json: source: missing", "allowed: a string"}},
	{"notes", "[]", NULL, {"m.json: notes: found an array (an array)", "allowed: a string"}},
	{"head_layout", "\"grouped\"", NULL, {"m.json: head_layout: found \"grouped\"",
					       "allowed: \"interleaved\", \"plain\""}},
	{"head_layout", "1", NULL, {"m.json: head_layout: found 1", "allowed: \"interleaved\", \"plain\""}},
	{"fp8", NULL, NULL, {"m.json: fp8: missing", "format, block, round_scale"}},
	{"fp8", "\"e4m3\"", NULL, {"m.json: fp8: found \"e4m3\"", "allowed: an object with keys format, "
				   "block, round_scale"}},
	{"fp8", FP8("\"e5m2\"", "128", "true"), NULL, {"m.json: fp8.format: found \"e5m2\"",
						       "allowed: \"e4m3\""}},
	{"fp8", FP8("\"e4m3\"", "128", "\"yes\""), NULL,
	 {"m.json: fp8.round_scale: found \"yes\" (a string)", "allowed: true, false"}},
	{"fp8", FP8("\"e4m3\"", "64", "true"), NULL,
	 {"m.json: quant.block: found 64, allowed: 128", "(model key fp8.block; needed by kernel "
	  "rmsnorm_quant forward of the training step)"}},
	{"fp8", "{\"format\": \"e4m3\", \"block\": 128}", NULL,
	 {"m.json: fp8.round_scale: missing", "allowed: true, false"}},
	{"fp8", "{\"format\": \"e4m3\", \"blocks\": 128, \"round_scale\": true}", NULL,
	 {"m.json: fp8: unknown key \"blocks\"", "allowed keys: format, block, round_scale",
	  "did you mean \"block\"?"}},
	{"fused_router", "1", NULL, {"m.json: fused_router: found 1", "allowed: true, false"}},
	/* a GEMM's n and k are no model keys: the message names the keys they come from */
	{"head_dim", "63", NULL,
	 {"m.json: n: found 1512, allowed: a multiple of 16",
	  "(model keys q_heads 16, kv_heads 4, head_dim 63: n = (q_heads + 2 kv_heads) head_dim; ",
	  "needed by kernel fp8_gemm forward of the training step)"}},
	{"shared_intermediate", "136", NULL,
	 {"m.json: k: found 136, allowed: a multiple of 16",
	  "(model key shared_intermediate 136: k = shared_intermediate; needed by kernel fp8_gemm"}},
	{NULL, NULL, "{\n  \"name\": \"m\",\n  \"hidden\": }", {"m.json: line 3, column 13",
								 "malformed JSON", "found \"}\""}},
	{NULL, NULL, "[1, 2]", {"m.json: top level: found an array", "allowed: a model config object"}},
	{NULL, NULL, "", {"m.json: found an empty document"}},
	{NULL, NULL, "{\"name\": \"a\", \"name\": \"b\"}", {"m.json: name: duplicate key"}},
};

static void test_bad_models(void **state)
{
	(void)state;
	size_t n = sizeof bad_models / sizeof bad_models[0];
	int failures = 0;
	assert_true(n >= 12);
	for (size_t i = 0; i < n; i++) {
		const struct bad *b = &bad_models[i];
		char *text = b->key ? mutate(b->key, b->value) : strdup(b->raw);
		assert_non_null(text);
		char *json = NULL;
		lg_status st = lg_model_expand_text(text, strlen(text), "m.json", &json);
		const char *msg = lg_last_error();
		bool ok = st == LG_ERR_SPEC && json == NULL && strncmp(msg, "m.json: ", 8) == 0;
		for (int w = 0; ok && w < 4 && b->want[w]; w++)
			ok = strstr(msg, b->want[w]) != NULL;
		if (!ok) {
			fprintf(stderr, "bad model %zu: status %s\n  message: %s\n", i, lg_status_str(st), msg);
			for (int w = 0; w < 4 && b->want[w]; w++)
				fprintf(stderr, "  want:    %s\n", b->want[w]);
			failures++;
		}
		free(json);
		free(text);
	}
	assert_int_equal(failures, 0);
}

/* An unknown key far from every model key gets no "did you mean". */
static void test_far_key_no_suggestion(void **state)
{
	(void)state;
	char *text = mutate("foo", "1"), *json = NULL;
	assert_int_equal(lg_model_expand_text(text, strlen(text), "m.json", &json), LG_ERR_SPEC);
	const char *msg = lg_last_error();
	assert_non_null(strstr(msg, "m.json: unknown key \"foo\", allowed keys: name, source"));
	assert_null(strstr(msg, "did you mean"));
	free(text);
	free(json);
}

static void test_api_errors(void **state)
{
	(void)state;
	char *json = NULL;
	assert_int_equal(lg_model_expand_text(NULL, 4, NULL, &json), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_model_expand_text("{}", 2, NULL, NULL), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_model_expand_text("{}", 2, NULL, &json), LG_ERR_SPEC);
	assert_null(json);
	assert_non_null(strstr(lg_last_error(), "<input>: name: missing"));
	assert_int_equal(lg_model_expand_file(MODELS "/no-such-model.json", &json), LG_ERR_IO);
	assert_non_null(strstr(lg_last_error(), "no-such-model.json: No such file or directory"));

	/* what is and is not a model config */
	static const char *const yes[] = {"{\"hidden\": 1}", "{\"fp8\": {}}", "{\"experts\": 8, \"x\": 1}"};
	static const char *const no[] = {"{\"name\": \"x\", \"kernels\": []}", "{\"hidden\": 1, \"kernels\": []}",
					 "{\"name\": \"x\"}", "[1]", "{", ""};
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
		assert_true(lg_model_is_config(yes[i], strlen(yes[i])));
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
		assert_false(lg_model_is_config(no[i], strlen(no[i])));
}

/* Truncated and mutated configs, from buffers of exactly their length (so
 * ASan sees any over-read): a spec error or success, never a crash. */
static void expand_exact(const char *text, size_t len)
{
	char *copy = malloc(len ? len : 1);
	assert_non_null(copy);
	memcpy(copy, text, len);
	char *json = NULL;
	lg_status st = lg_model_expand_text(copy, len, "fuzz.json", &json);
	assert_true(st == LG_OK || st == LG_ERR_SPEC);
	assert_true((st == LG_OK) == (json != NULL));
	if (st == LG_ERR_SPEC)
		assert_non_null(strstr(lg_last_error(), "fuzz.json: "));
	free(json);
	free(copy);
	(void)lg_model_is_config(text, len);
}

static void test_fuzz(void **state)
{
	(void)state;
	static const char subst[] = {'\0', '"', '{', '}', ',', ':', '9', '-', '0', ' ', (char)0xff};
	size_t len = 0;
	char *text = lg_test_read_file(LING_MINI, &len);
	assert_non_null(text);
	for (size_t i = 0; i <= len; i++)
		expand_exact(text, i);
	for (size_t i = 0; i < len; i++) {
		char keep = text[i];
		for (size_t k = 0; k < sizeof subst; k++) {
			text[i] = subst[k];
			expand_exact(text, len);
		}
		text[i] = keep;
	}
	/* random mutations of several bytes at once, cut at a random length */
	uint64_t st = lg_test_seed("test_model test_fuzz");
	char *copy = malloc(len + 1);
	assert_non_null(copy);
	for (int round = 0; round < 5000; round++) {
		memcpy(copy, text, len);
		lg_test_mutate(copy, len, &st);
		expand_exact(copy, lg_test_rand(&st) % 4 ? len : (size_t)(lg_test_rand(&st) % (len + 1)));
	}
	free(copy);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shipped_models), cmocka_unit_test(test_ling_mini),
		cmocka_unit_test(test_no_shared_expert), cmocka_unit_test(test_fused_router),
		cmocka_unit_test(test_head_layout),    cmocka_unit_test(test_for_archs),
		cmocka_unit_test(test_bad_models),
		cmocka_unit_test(test_far_key_no_suggestion),
		cmocka_unit_test(test_api_errors),     cmocka_unit_test(test_fuzz),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
