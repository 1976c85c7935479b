/*
 * test_forms.c - the typed launchers agree with the family declarations:
 * every launch form of every pass resolves, has its prototype in the
 * generated lingen_ops.h (parameters by name, type and order as the
 * declaration says), maps each parameter onto the pass's argument or size
 * of its name, and refuses kernels of other ops, passes or fixed keys. The
 * public signatures of the launchers are pinned at compile time.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "form.h"
#include "generate.h"
#include "testutil.h"

/* The prototype of `name` in the header, its parameters one a string with
 * single spaces ("lg_dptr x"); returns how many (-1: not found). */
static int prototype(const char *header, const char *name, char params[32][64])
{
	char want[96];
	snprintf(want, sizeof want, "lg_status %s(", name);
	const char *p = strstr(header, want);
	if (!p)
		return -1;
	p += strlen(want);
	int n = 0;
	while (*p && *p != ')' && n < 32) {
		size_t len = 0;
		bool space = false;
		for (; *p && *p != ',' && *p != ')'; p++) {
			if (isspace((unsigned char)*p)) {
				space = len > 0;
				continue;
			}
			if (space && len < 63)
				params[n][len++] = ' ';
			space = false;
			if (len < 63)
				params[n][len++] = *p;
		}
		params[n++][len] = '\0';
		if (*p == ',')
			p++;
	}
	return n;
}

/* The parameters the declaration gives launcher l, written as C. */
static int expected(const struct lg_launcher *l, char (*names)[32], char out[32][64])
{
	const struct lg_sig *g = &lg_family_get(l->op)->sig[l->pass];
	int n = 0;
	snprintf(out[n++], 64, "const lg_kernel *k");
	snprintf(out[n++], 64, "lg_stream stream");
	for (int s = 0; s < l->size_params; s++)
		for (int i = 0; i < g->nsizes; i++)
			if (l->size_from[i] == s)
				snprintf(out[n++], 64, "int64_t %s", g->sizes[i].name);
	for (int j = 0; j < l->params; j++)
		snprintf(out[n++], 64, "%s%.31s", j == l->list ? "const lg_tensor_list *" : "lg_dptr ", names[j]);
	return n;
}

static void test_every_form_has_its_prototype(void **state)
{
	(void)state;
	char *path = lg_test_path(LG_BUILD_DIR, "include/lingen_ops.h");
	char *header = lg_test_read_file(path, NULL);
	assert_non_null(header);
	int total = 0;
	for (int op = 0; op < LG_OP_COUNT; op++)
		for (int pass = 0; pass < LG_PASS_COUNT; pass++) {
			const struct lg_family *f = lg_family_get((enum lg_op)op);
			int nf = lg_form_count(f, (enum lg_pass)pass);
			assert_true(((f->passes >> pass) & 1u) ? nf >= 1 : nf == 0);
			for (int i = 0; i < nf; i++, total++) {
				struct lg_launcher l;
				char names[LG_MAX_ARGS][32], got[32][64], want[32][64];
				if (lg_form_resolve((enum lg_op)op, (enum lg_pass)pass, i, &l, names) != LG_OK)
					fail_msg("%s", lg_last_error());
				int ng = prototype(header, l.name, got), nw = expected(&l, names, want);
				if (ng != nw)
					fail_msg("%s: %d parameters in lingen_ops.h, the declaration gives %d", l.name, ng, nw);
				for (int j = 0; j < nw; j++)
					if (strcmp(got[j], want[j]) != 0)
						fail_msg("%s: parameter %d is \"%s\", the declaration gives \"%s\"", l.name, j,
							 got[j], want[j]);
				/* its comment, when the declaration has one */
				const char *doc = lg_form_doc((enum lg_op)op, (enum lg_pass)pass, i);
				if (doc) {
					char first[64];
					snprintf(first, sizeof first, "%.*s", (int)strcspn(doc, "\n"), doc);
					assert_non_null(strstr(header, first));
				}
			}
		}
	/* one prototype per form, nothing else */
	assert_int_equal(lg_test_count(header, "\nlg_status lg_"), total);
	printf("%d launchers, each as declared\n", total);
	free(header);
	free(path);
}

/* Each parameter lands on the argument (or size) of its name; the rest
 * are 0 or the form's fixed values; a list gives its table and rows. */
static void test_parameters_reach_their_arguments(void **state)
{
	(void)state;
	for (int op = 0; op < LG_OP_COUNT; op++)
		for (int pass = 0; pass < LG_PASS_COUNT; pass++) {
			const struct lg_family *f = lg_family_get((enum lg_op)op);
			const struct lg_sig *g = &f->sig[pass];
			for (int i = 0; i < lg_form_count(f, (enum lg_pass)pass); i++) {
				struct lg_launcher l;
				char names[LG_MAX_ARGS][32];
				assert_int_equal(lg_form_resolve((enum lg_op)op, (enum lg_pass)pass, i, &l, names), LG_OK);
				int64_t sizes[LG_MAX_SIZES], all_sizes[LG_MAX_SIZES];
				lg_dptr ptrs[LG_MAX_ARGS], all[LG_MAX_ARGS];
				for (int j = 0; j < LG_MAX_SIZES; j++)
					sizes[j] = 1000 + j;
				for (int j = 0; j < LG_MAX_ARGS; j++)
					ptrs[j] = 0x100u * (lg_dptr)(j + 1);
				lg_form_map(&l, NULL, sizes, ptrs, 77, 0xabc00, all_sizes, all);
				for (int s = 0; s < g->nsizes; s++) {
					int from = l.size_from[s];
					int64_t want = from >= 0 ? 1000 + from : from == LG_FORM_LIST ? 77 : l.size_value[s];
					assert_int_equal(all_sizes[s], want);
				}
				for (int a = 0; a < g->nargs; a++) {
					int by = -1;
					for (int j = 0; j < l.params; j++)
						if ((l.param_args[j] >> a) & 1u)
							by = j;
					lg_dptr want = by < 0 ? 0 : by == l.list ? 0xabc00 : ptrs[by];
					if (all[a] != want)
						fail_msg("%s: argument %s got 0x%llx, expected 0x%llx", l.name, g->args[a].name,
							 all[a], want);
					/* a parameter of one argument is named after it */
					bool one = by >= 0 && !(l.param_args[by] & (l.param_args[by] - 1));
					if (one && strncmp(names[by], g->args[a].name, strlen(g->args[a].name)) != 0)
						fail_msg("%s: parameter %s goes to argument %s", l.name, names[by],
							 g->args[a].name);
				}
			}
		}
}

static lg_spec *parse(const char *json)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	return s;
}

/* The form of `name` among op's forms of pass. */
static void launcher(enum lg_op op, enum lg_pass pass, const char *name, struct lg_launcher *l, char (*names)[32])
{
	for (int i = 0; i < lg_form_count(lg_family_get(op), pass); i++)
		if (lg_form_resolve(op, pass, i, l, names) == LG_OK && strcmp(l->name, name) == 0)
			return;
	fail_msg("no launcher %s", name);
}

/* The row map's routing goes to the one input its spec uses. */
static void test_routing_goes_to_the_used_input(void **state)
{
	(void)state;
	static const char *const routing[3] = {"mask", "topk_i32", "topk_i64"};
	struct lg_launcher l;
	char names[LG_MAX_ARGS][32];
	launcher(LG_OP_MOE_ROW_MAP, LG_PASS_FORWARD, "lg_moe_row_map_forward", &l, names);
	assert_string_equal(names[0], "routing");
	for (int r = 0; r < 3; r++) {
		char json[160];
		snprintf(json, sizeof json,
			 "{\"op\": \"moe_row_map\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"experts\": 8, "
			 "\"top_k\": 2, \"routing\": \"%s\"}", routing[r]);
		lg_spec *s = parse(json);
		unsigned char used[LG_MAX_ARGS];
		lg_spec_uses(s, used);
		int64_t sizes[1] = {5}, all_sizes[LG_MAX_SIZES];
		lg_dptr ptrs[LG_MAX_ARGS] = {0x1000, 0x2000}, all[LG_MAX_ARGS];
		lg_form_map(&l, used, sizes, ptrs, 0, 0, all_sizes, all);
		for (int a = 0; a < 3; a++)
			assert_true(all[a] == (a == r ? (lg_dptr)0x1000 : 0));
		assert_true(all[3] == 0x2000);
		lg_spec_free(s);
	}
}

/* A launcher takes only kernels of its op, pass and fixed keys, and says
 * what the kernel is and what it takes. */
static void test_launchers_check_their_kernels(void **state)
{
	(void)state;
	lg_spec *shard = parse("{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			       "\"vocab\": 4096, \"classes\": 8192, \"part\": \"shard\"}");
	struct lg_launcher fwd, stats, back;
	char names[LG_MAX_ARGS][32];
	launcher(LG_OP_CROSS_ENTROPY, LG_PASS_FORWARD, "lg_cross_entropy_forward", &fwd, names);
	launcher(LG_OP_CROSS_ENTROPY, LG_PASS_FORWARD, "lg_cross_entropy_shard_stats", &stats, names);
	launcher(LG_OP_CROSS_ENTROPY, LG_PASS_BACKWARD, "lg_cross_entropy_backward", &back, names);
	assert_int_equal(lg_form_check(&stats, shard, "E"), LG_OK);
	assert_int_equal(lg_form_check(&fwd, shard, "E"), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "has part \"shard\", fused false; this launcher takes part \"full\", "
					       "fused false"));
	assert_int_equal(lg_form_check(&back, shard, "E"), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "is op \"cross_entropy\", pass \"forward\"; this launcher takes"));
	struct lg_launcher norm;
	launcher(LG_OP_RMSNORM, LG_PASS_FORWARD, "lg_rmsnorm_forward", &norm, names);
	assert_int_equal(lg_form_check(&norm, shard, "E"), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "op \"rmsnorm\""));
	lg_spec_free(shard);
}

/* A list kernel reads its dtype's tensors, or both with "mixed". */
static void test_list_kernels_check_element_types(void **state)
{
	(void)state;
	lg_spec *plain = parse("{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"bf16\"}");
	lg_spec *mixed = parse("{\"op\": \"count_zero\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"mixed\": true}");
	const unsigned bf16 = 1u << LG_LIST_BF16, fp32 = 1u << LG_LIST_FP32;
	const struct lg_family *f = plain->fam;
	assert_non_null(f->check_list);
	assert_int_equal(f->check_list(plain, "fn", "E", bf16), LG_OK);
	assert_int_equal(f->check_list(plain, "fn", "E", bf16 | fp32), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "reads bf16 tensors only, the list holds bf16 and fp32"));
	assert_non_null(strstr(lg_last_error(), "\"mixed\": true"));
	assert_int_equal(mixed->fam->check_list(mixed, "fn", "E", bf16 | fp32), LG_OK);
	lg_spec_free(plain);
	lg_spec_free(mixed);
}

/* The public signatures, as users and tools call them: a launcher whose
 * parameters change does not compile here. */
#define SIG(name, ...)                                                                              \
	lg_status (*const name##_p)(const lg_kernel *, lg_stream, __VA_ARGS__) = name;              \
	(void)name##_p
#define D lg_dptr
#define I int64_t
static void test_public_signatures(void **state)
{
	(void)state;
	SIG(lg_rmsnorm_quant_forward, I, D, D, D, D, D, D, D);
	SIG(lg_rmsnorm_forward, I, D, D, D, D);
	SIG(lg_rmsnorm_backward, I, D, D, D, D, D, D, D);
	SIG(lg_fp8_quant_forward, I, D, D, D, D, D);
	SIG(lg_fp8_quant_batched_forward, I, I, D, D, D, D, D, D);
	SIG(lg_fp8_quant_weight_forward, I, D, D, D, D, D);
	SIG(lg_group_rmsnorm_gate_forward, I, I, D, D, D, D);
	SIG(lg_group_rmsnorm_gate_backward, I, I, D, D, D, D, D, D, D, D);
	SIG(lg_qk_norm_rope_forward, I, I, D, D, D, D, D, D, D, D);
	SIG(lg_qk_norm_rope_backward, I, I, D, D, D, D, D, D, D, D, D, D, D, D);
	SIG(lg_cross_entropy_forward, I, D, D, D, D, D);
	SIG(lg_cross_entropy_fused, I, D, D, D, D, D, D, D);
	SIG(lg_cross_entropy_backward, I, I, D, D, D, D, D, D);
	SIG(lg_cross_entropy_shard_stats, I, I, D, D, D);
	SIG(lg_cross_entropy_merge, I, I, D, D, D, D, D);
	SIG(lg_grad_norm, const lg_tensor_list *, D, D);
	SIG(lg_count_zero, const lg_tensor_list *, D, D);
	SIG(lg_swiglu_quant_forward, I, D, D, D, D, D);
	SIG(lg_swiglu_quant_backward, I, D, D, D, D, D, D, D);
	SIG(lg_batch_swiglu_quant_forward, I, D, D, D, D, D, D, D);
	SIG(lg_batch_swiglu_quant_backward, I, D, D, D, D, D, D, D, D, D, D);
	SIG(lg_router_gemm_forward, I, D, D, D);
	SIG(lg_router_gemm_backward, I, D, D, D, D, D, D);
	SIG(lg_moe_row_map_forward, I, D, D, D, D, D, D, D);
	SIG(lg_moe_permute_forward, I, D, D, D, D, D, D, D, D, D);
	SIG(lg_moe_permute_backward, I, D, D, D, D, D);
	SIG(lg_moe_unpermute_forward, I, D, D, D, D, D);
	SIG(lg_moe_unpermute_backward, I, D, D, D, D, D, D, D, D, D);
	SIG(lg_moe_permute_quant_forward, I, D, D, D, D, D, D, D, D, D);
	SIG(lg_rmsnorm_router_forward, I, D, D, D, D, D, D, D, D, D, D);
	/* and each refuses a NULL kernel */
	assert_int_equal(lg_rmsnorm_quant_forward_p(NULL, NULL, 8, 0, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_cross_entropy_merge_p(NULL, NULL, 8, 2, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_grad_norm_p(NULL, NULL, NULL, 0, 0), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "lg_grad_norm: the tensor list must not be NULL"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_form_has_its_prototype),
		cmocka_unit_test(test_parameters_reach_their_arguments),
		cmocka_unit_test(test_routing_goes_to_the_used_input),
		cmocka_unit_test(test_launchers_check_their_kernels),
		cmocka_unit_test(test_list_kernels_check_element_types),
		cmocka_unit_test(test_public_signatures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
