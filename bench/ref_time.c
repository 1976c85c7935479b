/*
 * ref_time.c - the host side of `lingen check` timed without a GPU: for
 * each case (a spec and its run-time sizes), the buffers as
 * lg_gpu_case_init makes them (calloc), the reference's fill, its run, and
 * the comparison of every output against a copy of itself (a GPU that got
 * everything right: the comparison's common path). Prints the CPU seconds
 * of each step (all threads), and the wall seconds of all. The built-in cases are the heavy ones of the GPU tests
 * (tests/gpu_test_*.c); or give cases on the command line:
 *
 *   build-rel/bench/ref_time                       (the built-in list)
 *   build-rel/bench/ref_time 'SPEC JSON' SIZE[,SIZE...] ...
 *
 * LINGEN_REF_THREADS sets the references' threads (lg_ref_parallel_rows).
 * REF_TIME_DUMP=DIR writes every buffer (and slack) after the run, case k's
 * argument i to DIR/k.i (DIR/k.i.slack); REF_TIME_LOAD=DIR takes the inputs
 * from such files instead of the fill: two builds' references compared on
 * the same inputs (cmp the files).
 * Not a test: it asserts nothing; the references' own tests do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compare.h"
#include "generate.h"
#include "harness.h"
#include "lingen.h"
#include "ref.h"
#include "spec.h"

/* CPU seconds of the process (all its threads): the work, which a
 * shared machine's load does not change; LINGEN_REF_THREADS=1 makes it
 * the serial time. */
static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct times {
	double alloc, fill, run, cmp;
};

static int ncase;

static void dump(const char *dir, const char *what, int i, const void *p, size_t bytes, bool load)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%d.%d%s", dir, ncase, i, what);
	FILE *f = fopen(path, load ? "rb" : "wb");
	if (!f || (load ? fread((void *)p, 1, bytes, f) : fwrite(p, 1, bytes, f)) != bytes) {
		fprintf(stderr, "%s: cannot %s\n", path, load ? "read" : "write");
		exit(1);
	}
	fclose(f);
}

static int one(const char *json, const int64_t *sizes, int nsizes, struct times *tot)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK) {
		fprintf(stderr, "%s: %s\n", json, lg_last_error());
		return 1;
	}
	const struct lg_family *f = lg_family_get(s->op);
	int64_t sz[LG_MAX_SIZES];
	lg_sizes_at(f, s->pass, sizes[0], sz);
	for (int i = 0; i < nsizes && i < f->sig[s->pass].nsizes; i++)
		sz[i] = sizes[i];
	unsigned char used[LG_MAX_ARGS];
	lg_spec_uses(s, used);
	struct lg_ref_case c;
	void *got[LG_MAX_ARGS] = {0};
	double t0 = now();
	if (lg_ref_case_init(&c, s, sz, used, 0) != LG_OK) {
		fprintf(stderr, "%s: %s\n", json, lg_last_error());
		return 1;
	}
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->describe(s, &c);
	for (int i = 0; i < c.n; i++) {
		size_t bytes = c.buf[i].count * c.buf[i].elem;
		if (!bytes)
			continue;
		c.buf[i].host = calloc(1, bytes);
		if (c.buf[i].output)
			got[i] = calloc(1, bytes);
		if (!c.buf[i].host || (c.buf[i].output && !got[i])) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
	}
	double t1 = now();
	const char *load = getenv("REF_TIME_LOAD"), *save = getenv("REF_TIME_DUMP");
	if (load) {
		for (int i = 0; i < c.n; i++)
			if (!c.buf[i].output && c.buf[i].count)
				dump(load, "", i, c.buf[i].host, c.buf[i].count * c.buf[i].elem, true);
	} else {
		rf->fill(s, &c, 12345);
	}
	double t2 = now();
	rf->run(s, &c);
	double t3 = now();
	for (int i = 0; save && i < c.n; i++) {
		if (c.buf[i].count)
			dump(save, "", i, c.buf[i].host, c.buf[i].count * c.buf[i].elem, false);
		if (c.buf[i].slack)
			dump(save, ".slack", i, c.buf[i].slack, c.buf[i].count * sizeof *c.buf[i].slack, false);
	}
	ncase++;
	bool pass = true;
	for (int i = 0; i < c.n; i++) {
		if (!c.buf[i].output || !c.buf[i].count)
			continue;
		memcpy(got[i], c.buf[i].host, c.buf[i].count * c.buf[i].elem);
		struct lg_check_measure m;
		lg_compare(&c.buf[i], got[i], 5, stdout, &m);
		pass = pass && m.pass;
	}
	double t4 = now();
	printf("%-62.62s %8lld  alloc %6.2f  fill %6.2f  run %6.2f  compare %6.2f  total %6.2f%s\n",
	       lg_spec_entry(s), (long long)sz[0], t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0,
	       pass ? "" : "  (a copy does not compare equal!)");
	fflush(stdout);
	tot->alloc += t1 - t0, tot->fill += t2 - t1, tot->run += t3 - t2, tot->cmp += t4 - t3;
	for (int i = 0; i < c.n; i++) {
		free(c.buf[i].host);
		free(c.buf[i].slack);
		free(got[i]);
	}
	free(c.data);
	lg_spec_free(s);
	return pass ? 0 : 1;
}

#define K(op, pass, keys) "{\"op\": \"" op "\", \"pass\": \"" pass "\", \"dtype\": \"bf16\", " keys "}"

/* The largest cases of the GPU tests, one of each kind. */
static const struct {
	const char *json;
	int64_t sizes[3];
} heavy[] = {
	/* gpu_test_fp8_quant */
	{K("fp8_quant", "forward", "\"hidden\": 7168, \"quant\": {\"output\": \"both\"}"), {8192}},
	{K("fp8_quant_batched", "forward", "\"hidden\": 1024, \"quant\": {\"output\": \"both\"}"), {65536, 256}},
	{K("fp8_quant_weight", "forward", "\"hidden\": 7168, \"quant\": {}"), {2048}},
	/* gpu_test_swiglu_quant */
	{K("swiglu_quant", "forward", "\"intermediate\": 2048, \"quant\": {\"round_scale\": true}"), {8192}},
	{K("swiglu_quant", "backward", "\"intermediate\": 512, \"quant\": {\"round_scale\": true}"), {8192}},
	{K("swiglu_quant", "forward", "\"intermediate\": 2048, \"quant\": {\"round_scale\": false}"), {4097}},
	{K("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 256, \"quant\": {\"round_scale\": true}"),
	 {65536}},
	{K("batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 256, \"quant\": {\"round_scale\": true}"),
	 {65536}},
	/* gpu_test_cross_entropy */
	{K("cross_entropy", "forward", "\"vocab\": 157184"), {1024}},
	{K("cross_entropy", "forward", "\"vocab\": 157184, \"fused\": true"), {1024}},
	{K("cross_entropy", "backward", "\"vocab\": 157184"), {1024}},
	/* gpu_test_moe */
	{K("moe_unpermute", "forward", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, \"multiple\": 16"), {8192}},
	{K("moe_unpermute", "backward", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, \"multiple\": 16, "
				       "\"weighted\": true"), {8192}},
	{K("moe_unpermute", "forward", "\"hidden\": 7168, \"experts\": 96, \"top_k\": 8, \"multiple\": 128"), {1000}},
	{K("moe_permute", "forward", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, \"multiple\": 16"), {8192}},
	{K("moe_permute", "backward", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, \"multiple\": 16"), {8192}},
	{K("moe_permute_quant", "forward", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, \"multiple\": 16, "
					   "\"quant\": {\"output\": \"both\"}"), {8192}},
	{K("moe_permute_quant", "forward", "\"hidden\": 7168, \"experts\": 160, \"top_k\": 6, "
					   "\"quant\": {\"output\": \"both\"}"), {1000}},
};

int main(int argc, char **argv)
{
	struct times tot = {0};
	int rc = 0;
	double t0 = now(), w0 = wall();
	if (argc > 1) {
		for (int a = 1; a + 1 < argc; a += 2) {
			int64_t sizes[3] = {0};
			int n = 0;
			for (char *p = argv[a + 1]; n < 3 && *p; n++) {
				sizes[n] = strtoll(p, &p, 10);
				if (*p == ',')
					p++;
			}
			rc |= one(argv[a], sizes, n, &tot);
		}
	} else {
		for (size_t i = 0; i < sizeof heavy / sizeof heavy[0]; i++) {
			int n = heavy[i].sizes[2] ? 3 : heavy[i].sizes[1] ? 2 : 1;
			rc |= one(heavy[i].json, heavy[i].sizes, n, &tot);
		}
	}
	printf("all (CPU s): alloc %.2f  fill %.2f  run %.2f  compare %.2f  total %.2f; wall %.2f s, %d threads\n",
	       tot.alloc, tot.fill, tot.run, tot.cmp, now() - t0, wall() - w0, lg_ref_threads());
	return rc;
}
