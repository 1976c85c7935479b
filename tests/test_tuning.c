/*
 * test_tuning.c - tuning files (gen/core/tuning.h) and where they apply: a good
 * file parses and round-trips; every way a file can be wrong gives one
 * message naming the file, the JSON path, what was found and what is
 * allowed; the precedence a context applies (the spec's own tile, then the
 * tuning entry, then the heuristic; LINGEN_TUNING and lg_ctx_opts.tuning,
 * "off"); every family's tile candidates plan for sm_90a and sm_80; every
 * shipped configs/tuning/<arch>.json parses; `lingen tune` without a GPU.
 *
 * CPU only; one case compiles with NVRTC (the context's cubin path).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "context.h"
#include "family.h"
#include "generate.h"
#include "lingen.h"
#include "proc.h"
#include "spec.h"
#include "testutil.h"
#include "tuning.h"

/* Key index of a tile key of rmsnorm_quant (QT) or rmsnorm (NT). */
#define QT(name) lg_family_key(lg_family_get(LG_OP_RMSNORM_QUANT), "tile." name)
#define NT(name) lg_family_key(lg_family_get(LG_OP_RMSNORM), "tile." name)

#define KQ(h) "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #h ", \"quant\": {}}"
#define KN "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048}"
#define FILE_OF(arch, entries) "{\"arch\": \"" arch "\", \"entries\": [" entries "]}"
#define ENTRY(key, tile) "{\"key\": " key ", \"tile\": " tile "}"

static const char good[] =
	"{\"arch\": \"sm_90a\", \"made_by\": \"lingen tune x.json\", \"device\": \"NVIDIA H200\",\n"
	" \"date\": \"2026-12-01\", \"entries\": [\n"
	"  {\"key\": " KQ(2048) ", \"tile\": {\"threads\": 256, \"rows\": 8}, \"us\": 34.5, \"us_default\": 35.17},\n"
	"  {\"key\": " KN ", \"tile\": {\"threads\": 512}, \"us\": 20}\n"
	"]}\n";

static lg_spec *spec(const char *json)
{
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse(json, &s), LG_OK);
	return s;
}

static void test_parse_good(void **state)
{
	(void)state;
	struct lg_tuning *t = NULL;
	assert_int_equal(lg_tuning_parse(good, strlen(good), "cfg/sm_90a.json", &t), LG_OK);
	assert_string_equal(t->arch, "sm_90a");
	assert_string_equal(t->device, "NVIDIA H200");
	assert_string_equal(t->made_by, "lingen tune x.json");
	assert_string_equal(t->date, "2026-12-01");
	assert_int_equal(t->n, 2);
	lg_spec *q = spec(KQ(2048)), *n = spec(KN), *other = spec(KQ(4096));
	const struct lg_tuning_entry *e = lg_tuning_find(t, q);
	assert_non_null(e);
	assert_int_equal(e->tile.set, ((uint64_t)1 << QT("threads")) | ((uint64_t)1 << QT("rows")));
	assert_int_equal(e->tile.v[QT("threads")], 256);
	assert_int_equal(e->tile.v[QT("rows")], 8);
	assert_true(e->us == 34.5 && e->us_default == 35.17);
	e = lg_tuning_find(t, n);
	assert_non_null(e);
	assert_true(e->us == 20 && e->us_default < 0);
	assert_null(lg_tuning_find(t, other));
	/* a spec with the same key but its own tile finds the entry; apply keeps its tile */
	lg_spec *qt = spec("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			   "\"hidden\": 2048, \"quant\": {\"round_scale\": true}, \"tile\": {\"threads\": 128}}");
	assert_ptr_equal(lg_tuning_find(t, qt), lg_tuning_find(t, q));
	struct lg_spec r;
	assert_int_equal(lg_tuning_apply(t, qt, &r), LG_OK);
	assert_string_equal(r.entry, qt->entry);
	assert_int_equal(lg_tuning_apply(t, q, &r), LG_OK);
	assert_int_equal(r.v[QT("threads")], 256);
	assert_non_null(strstr(r.entry, "_t"));
	lg_spec_free(q);
	lg_spec_free(n);
	lg_spec_free(other);
	lg_spec_free(qt);
	lg_tuning_free(t);
}

struct bad {
	const char *file; /* display name (default sm_90a.json) */
	const char *json;
	const char *want[3];
};

static const struct bad bad_files[] = {
	{NULL, "{\"arch\": \"sm_90a\",\n \"entries\": [}", {"line 2, column", "malformed JSON"}},
	{NULL, "[]", {"top level: found an array", "allowed: an object"}},
	{NULL, "{\"arch\": \"sm_90a\", \"entries\": [], \"archs\": 1}",
	 {"unknown key \"archs\"", "allowed keys: arch, made_by, device, date, entries"}},
	{NULL, "{\"entries\": []}", {"arch: missing", "allowed: an arch name"}},
	{NULL, "{\"arch\": \"sm_9\", \"entries\": []}", {"arch: found \"sm_9\"", "allowed: an arch name"}},
	{NULL, "{\"arch\": \"sm_80\", \"entries\": []}",
	 {"arch: found \"sm_80\", allowed: \"sm_90a\" (the file is named sm_90a.json)"}},
	{NULL, "{\"arch\": \"sm_90a\", \"made_by\": 3, \"entries\": []}",
	 {"made_by: found 3 (a number), allowed: a string"}},
	{NULL, "{\"arch\": \"sm_90a\"}", {"entries: missing", "allowed: an array of entries"}},
	{NULL, "{\"arch\": \"sm_90a\", \"entries\": {}}", {"entries: found an object, allowed: an array of entries"}},
	{NULL, FILE_OF("sm_90a", "42"), {"entries[0]: found 42", "allowed: an object {\"key\""}},
	{NULL, FILE_OF("sm_90a", "{\"key\": " KN ", \"tiles\": {}}"),
	 {"entries[0]: unknown key \"tiles\"", "allowed keys: key, tile, us, us_default", "did you mean \"tile\"?"}},
	{NULL, FILE_OF("sm_90a", "{\"key\": " KN "}"), {"entries[0].tile: missing"}},
	{NULL, FILE_OF("sm_90a", ENTRY("\"rmsnorm\"", "{\"threads\": 256}")),
	 {"entries[0].key: found \"rmsnorm\"", "allowed: an object"}},
	{NULL, FILE_OF("sm_90a", ENTRY("{\"op\": \"layernorm\", \"pass\": \"forward\"}", "{\"threads\": 256}")),
	 {"entries[0].key.op: found \"layernorm\"", "rmsnorm_quant"}},
	{NULL, FILE_OF("sm_90a", ENTRY("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\"}",
				       "{\"threads\": 256}")),
	 {"entries[0].key.hidden: missing"}},
	{NULL, FILE_OF("sm_90a", ENTRY("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 2048, \"tile\": {\"threads\": 128}}", "{\"threads\": 256}")),
	 {"entries[0].key.tile: found an object", "allowed: no tile in a key"}},
	{NULL, FILE_OF("sm_90a", ENTRY(KN, "{\"cluster\": 2}")),
	 {"entries[0].tile.cluster: found 2, not used by op rmsnorm", "allowed keys: rows, threads"}},
	{NULL, FILE_OF("sm_90a", ENTRY(KN, "{\"warps\": 2}")),
	 {"entries[0].tile: unknown key \"warps\"", "allowed keys: rows, threads"}},
	{NULL, FILE_OF("sm_90a", ENTRY(KN, "{}")),
	 {"entries[0].tile: found an empty object", "allowed: an object with one or more of rows, threads"}},
	{NULL, FILE_OF("sm_90a", ENTRY(KN, "{\"threads\": \"many\"}")),
	 {"entries[0].tile.threads: found \"many\" (a string)", "allowed: 128, 256, 512, 1024"}},
	{NULL, FILE_OF("sm_90a", ENTRY(KN, "{\"threads\": 100}")),
	 {"entries[0].tile.threads: found 100", "allowed: 128, 256, 512, 1024"}},
	{NULL, FILE_OF("sm_90a", ENTRY(KQ(2048), "{\"cluster\": 4}")),
	 {"entries[0].tile.cluster: found 4", "allowed: 1 (two kernels) or hidden/128 = 16"}},
	{"tuning/sm_80.json", FILE_OF("sm_80", ENTRY(KQ(2048), "{\"cluster\": 16}")),
	 {"entries[0].tile: found a tile that does not plan for sm_80", "needs sm_90 or newer"}},
	{NULL, FILE_OF("sm_90a", "{\"key\": " KN ", \"tile\": {\"threads\": 256}, \"us\": -1}"),
	 {"entries[0].us: found -1, allowed: a time in microseconds >= 0"}},
	{NULL, FILE_OF("sm_90a", "{\"key\": " KN ", \"tile\": {\"threads\": 256}, \"us_default\": \"fast\"}"),
	 {"entries[0].us_default: found \"fast\", allowed: a time in microseconds >= 0"}},
	{NULL, FILE_OF("sm_90a", ENTRY(KQ(2048), "{\"threads\": 256}") ", "
				 ENTRY("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 2048, \"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", "
				       "\"block\": 128, \"round_scale\": true, \"output\": \"both\"}}",
				       "{\"threads\": 512}")),
	 {"entries[1].key: found the key of entries[0] again", "allowed: one entry per key"}},
	{NULL, "{\"arch\": \"sm_90a\", \"arch\": \"sm_90a\", \"entries\": []}", {"arch: duplicate key"}},
};

static void test_bad_files(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
		const struct bad *b = &bad_files[i];
		const char *file = b->file ? b->file : "cfg/sm_90a.json";
		struct lg_tuning *t = (struct lg_tuning *)1;
		lg_status st = lg_tuning_parse(b->json, strlen(b->json), file, &t);
		const char *msg = lg_last_error();
		fprintf(stderr, "case %zu: %s\n", i, msg);
		assert_int_equal(st, LG_ERR_SPEC);
		assert_null(t);
		assert_true(strncmp(msg, file, strlen(file)) == 0);
		for (int k = 0; k < 3 && b->want[k]; k++) {
			if (!strstr(msg, b->want[k]))
				fail_msg("case %zu: message\n  %s\nlacks\n  %s", i, msg, b->want[k]);
		}
	}
}

static void test_roundtrip(void **state)
{
	(void)state;
	struct lg_tuning *t = NULL, *u = NULL;
	assert_int_equal(lg_tuning_parse(good, strlen(good), "sm_90a.json", &t), LG_OK);
	lg_spec *q = spec(KQ(2048)), *b = spec("{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", "
					      "\"hidden\": 4096}");
	struct lg_tile_choice c = lg_tile1(QT("threads"), 512), cb = lg_tile1(NT("threads"), 512);
	assert_int_equal(lg_tuning_set(t, q, &c, 30.25, 35.0), LG_OK); /* replaces */
	assert_int_equal(lg_tuning_set(t, b, &cb, 50.0, -1), LG_OK);   /* adds */
	assert_int_equal(t->n, 3);
	assert_int_equal(lg_tuning_note(&t->device, "dev \"x\"\n"), LG_OK);
	char *text = lg_tuning_to_json(t);
	assert_non_null(text);
	assert_int_equal(lg_tuning_parse(text, strlen(text), "sm_90a.json", &u), LG_OK);
	assert_int_equal(u->n, 3);
	assert_string_equal(u->device, "dev \"x\"\n");
	const struct lg_tuning_entry *e = lg_tuning_find(u, q);
	assert_non_null(e);
	assert_int_equal(e->tile.set, (uint64_t)1 << QT("threads"));
	assert_int_equal(e->tile.v[QT("threads")], 512);
	assert_true(e->us == 30.25 && e->us_default == 35.0);
	/* same table, same text (entries sorted by key) */
	char *again = lg_tuning_to_json(u);
	assert_string_equal(text, again);
	assert_true(lg_tuning_remove(u, q));
	assert_false(lg_tuning_remove(u, q));
	assert_int_equal(u->n, 2);
	assert_null(lg_tuning_find(u, q));
	assert_non_null(lg_tuning_find(u, b));
	/* an empty table */
	struct lg_tuning *z = NULL, *z2 = NULL;
	assert_int_equal(lg_tuning_create("sm_80", &z), LG_OK);
	char *zt = lg_tuning_to_json(z);
	assert_int_equal(lg_tuning_parse(zt, strlen(zt), "sm_80.json", &z2), LG_OK);
	assert_int_equal(z2->n, 0);
	free(zt);
	lg_tuning_free(z);
	lg_tuning_free(z2);
	free(text);
	free(again);
	lg_spec_free(q);
	lg_spec_free(b);
	lg_tuning_free(t);
	lg_tuning_free(u);
}

/* ------------------------------------------------------ precedence */

struct dirs {
	char *dir, *file;
};

static struct dirs make_dir(const char *arch, const char *text)
{
	struct dirs d = {lg_test_tmpdir("tuning"), NULL};
	char name[32];
	snprintf(name, sizeof name, "%s.json", arch);
	d.file = lg_test_path(d.dir, name);
	lg_test_write_file(d.file, text, strlen(text));
	return d;
}

static void free_dir(struct dirs *d)
{
	lg_test_rm_rf(d->dir);
	free(d->dir);
	free(d->file);
}

static lg_ctx *ctx_for(const char *arch, const char *tuning)
{
	lg_ctx_opts o = {.arch = arch, .cache_dir = "off", .tuning = tuning};
	lg_ctx *c = NULL;
	lg_status st = lg_ctx_create(&o, &c);
	if (st != LG_OK)
		fail_msg("lg_ctx_create: %s", lg_last_error());
	return c;
}

/* The plan the context makes for s. */
static struct lg_plan plan_in(lg_ctx *c, const lg_spec *s, char **src)
{
	struct lg_spec r;
	struct lg_plan p;
	assert_int_equal(lg_ctx_resolve(c, s, &r), LG_OK);
	assert_int_equal(lg_generate_for(&r, &c->target, &p, src, NULL), LG_OK);
	return p;
}

static void test_precedence(void **state)
{
	(void)state;
	struct dirs d = make_dir("sm_90a", good);
	lg_ctx *c = ctx_for("sm_90a", d.dir);
	assert_non_null(c->tuning);
	char *src = NULL;
	/* (a) the spec's own tile wins over the entry for its key */
	lg_spec *own = spec("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			    "\"hidden\": 2048, \"quant\": {}, \"tile\": {\"threads\": 512}}");
	struct lg_plan p = plan_in(c, own, &src);
	assert_int_equal(p.tile[QT("threads")], 512);
	assert_non_null(strstr(src, "\"tile\": {\"threads\": 512}"));
	free(src);
	/* (b) no tile: the tuning entry's tile, visible in the banner and entry names */
	lg_spec *q = spec(KQ(2048));
	p = plan_in(c, q, &src);
	assert_int_equal(p.tile[QT("threads")], 256);
	assert_int_equal(p.tile[QT("rows")], 8);
	assert_non_null(strstr(src, "\"tile\": {\"rows\": 8, \"threads\": 256}"));
	assert_non_null(strstr(p.entry[0], "_tr8t256"));
	free(src);
	/* (c) no entry for the key: the heuristic (128 threads for rmsnorm_quant) */
	lg_spec *h = spec(KQ(4096));
	p = plan_in(c, h, &src);
	assert_int_equal(p.tile[QT("threads")], 128);
	assert_null(strstr(src, "\"tile\""));
	free(src);
	lg_ctx_destroy(c);
	/* (d) "off" (option or LINGEN_TUNING): the heuristic */
	c = ctx_for("sm_90a", "off");
	assert_null(c->tuning);
	p = plan_in(c, q, &src);
	assert_int_equal(p.tile[QT("threads")], 128);
	free(src);
	lg_ctx_destroy(c);
	setenv("LINGEN_TUNING", "off", 1);
	c = ctx_for("sm_90a", NULL);
	assert_null(c->tuning);
	lg_ctx_destroy(c);
	/* LINGEN_TUNING as a folder and as a file; the option beats it */
	setenv("LINGEN_TUNING", d.dir, 1);
	c = ctx_for("sm_90a", NULL);
	assert_non_null(c->tuning);
	p = plan_in(c, q, &src);
	assert_int_equal(p.tile[QT("threads")], 256);
	free(src);
	lg_ctx_destroy(c);
	c = ctx_for("sm_90a", "off");
	assert_null(c->tuning);
	lg_ctx_destroy(c);
	setenv("LINGEN_TUNING", d.file, 1);
	c = ctx_for("sm_90a", NULL);
	assert_non_null(c->tuning);
	lg_ctx_destroy(c);
	/* a folder without <arch>.json: heuristics */
	setenv("LINGEN_TUNING", d.dir, 1);
	c = ctx_for("sm_80", NULL);
	assert_null(c->tuning);
	lg_ctx_destroy(c);
	unsetenv("LINGEN_TUNING");
	lg_spec_free(own);
	lg_spec_free(q);
	lg_spec_free(h);
	free_dir(&d);
}

/* The context's cubin for a spec without tile is the tuned one, kept under
 * the user's spec in the memory cache. Needs NVRTC. */
static void test_context_cubin(void **state)
{
	(void)state;
	struct dirs d = make_dir("sm_90a", good);
	lg_ctx *c = ctx_for("sm_90a", d.file);
	lg_spec *q = spec(KQ(2048));
	const void *cubin;
	size_t size;
	lg_status st = lg_ctx_cubin(c, q, &cubin, &size);
	if (st == LG_ERR_NVRTC) {
		fprintf(stderr, "skipped: no NVRTC (%s)\n", lg_last_error());
	} else {
		assert_int_equal(st, LG_OK);
		lg_test_assert_cubin(cubin, size);
		assert_int_equal(c->n, 1);
		char *canon = lg_spec_canonical(q);
		assert_string_equal(c->entries[0]->canon, canon);
		free(canon);
		assert_int_equal(c->entries[0]->plan.tile[QT("threads")], 256);
		assert_non_null(strstr(c->entries[0]->plan.entry[0], "_tr8t256"));
	}
	lg_spec_free(q);
	lg_ctx_destroy(c);
	free_dir(&d);
}

static void test_bad_file_stops_context(void **state)
{
	(void)state;
	struct dirs d = make_dir("sm_90a", FILE_OF("sm_90a", ENTRY(KN, "{\"threads\": 100}")));
	lg_ctx_opts o = {.arch = "sm_90a", .cache_dir = "off", .tuning = d.dir};
	lg_ctx *c = NULL;
	assert_int_equal(lg_ctx_create(&o, &c), LG_ERR_SPEC);
	assert_null(c);
	const char *msg = lg_last_error();
	assert_non_null(strstr(msg, d.file));
	assert_non_null(strstr(msg, "entries[0].tile.threads: found 100"));
	assert_non_null(strstr(msg, "LINGEN_TUNING=off"));
	/* a file for another arch named directly */
	o.arch = "sm_80";
	o.tuning = d.file;
	assert_int_equal(lg_ctx_create(&o, &c), LG_ERR_SPEC);
	/* a named file that is missing */
	char *missing = lg_test_path(d.dir, "nope.json");
	o.tuning = missing;
	assert_int_equal(lg_ctx_create(&o, &c), LG_ERR_IO);
	assert_non_null(strstr(lg_last_error(), missing));
	assert_non_null(strstr(lg_last_error(), "tuning file "));
	assert_non_null(strstr(lg_last_error(), "nope.json: No such file or directory"));
	free(missing);
	/* arch mismatch with a file not named after an arch */
	struct lg_tuning *t = NULL;
	char *other = lg_test_path(d.dir, "mine.json");
	const char *text = FILE_OF("sm_80", "");
	lg_test_write_file(other, text, strlen(text));
	assert_int_equal(lg_tuning_load(other, "sm_90a", false, &t), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "arch: found \"sm_80\", allowed: \"sm_90a\""));
	assert_int_equal(lg_tuning_load(other, "sm_80", false, &t), LG_OK);
	lg_tuning_free(t);
	free(other);
	free_dir(&d);
}

/* ------------------------------------------------------ candidates */

static void test_candidates(void **state)
{
	(void)state;
	static const char *const specs[] = {
		KQ(128), KQ(2048), KQ(5120), KQ(16384),
		"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1152, "
		"\"quant\": {\"output\": \"columnwise\"}}",
		"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
		"\"quant\": {\"output\": \"rowwise\", \"round_scale\": false}}",
		KN,
		"{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 128}",
		"{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 2048}",
		"{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 16384}",
	};
	static const char *const archs[] = {"sm_90a", "sm_80"};
	for (size_t a = 0; a < 2; a++) {
		struct lg_target tg;
		assert_true(lg_target_parse(archs[a], &tg));
		for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
			lg_spec *s = spec(specs[i]);
			const struct lg_family *f = lg_family_get(s->op);
			struct lg_tile_choice c[LG_MAX_CANDIDATES];
			assert_non_null(f->candidates);
			int n = f->candidates(s, &tg, c, LG_MAX_CANDIDATES);
			assert_true(n >= 3);
			for (int k = 0; k < n; k++) {
				struct lg_spec v;
				struct lg_plan p;
				assert_int_equal(lg_spec_with_tile(s, &c[k], &v), LG_OK);
				assert_int_equal(lg_spec_check(&v, ""), LG_OK);
				assert_int_equal(lg_plan_for(&v, &tg, &p), LG_OK);
				char *src = NULL;
				assert_int_equal(lg_generate_for(&v, &tg, &p, &src, NULL), LG_OK);
				free(src);
			}
			lg_spec_free(s);
		}
	}
	/* the counts the brief asks for at hidden 2048 */
	struct lg_target h, a;
	struct lg_tile_choice c[LG_MAX_CANDIDATES];
	assert_true(lg_target_parse("sm_90a", &h) && lg_target_parse("sm_80", &a));
	lg_spec *q = spec(KQ(2048)), *n = spec(KN), *b = spec(specs[8]), *big = spec(KQ(5120));
	const struct lg_family *fq = lg_family_get(LG_OP_RMSNORM_QUANT), *fn = lg_family_get(LG_OP_RMSNORM);
	/* 3 threads, 256x8, 2 fused, 2 one-pass (slab 256, 512; 128 needs a cluster of 16) */
	assert_int_equal(fq->candidates(q, &h, c, LG_MAX_CANDIDATES), 8);
	assert_int_equal(c[4].v[QT("cluster")], 16);
	assert_int_equal(c[5].v[QT("stages")], 2);
	assert_int_equal(c[6].v[QT("slab")], 256);
	assert_int_equal(c[7].v[QT("slab")], 512);
	assert_int_equal(fq->candidates(q, &a, c, LG_MAX_CANDIDATES), 4);      /* no fused on sm_80 */
	assert_int_equal(fq->candidates(big, &h, c, LG_MAX_CANDIDATES), 4);    /* hidden/128 > 16, /512 > 8 */
	assert_int_equal(fq->candidates(q, &h, c, 2), 2);                      /* max honoured */
	/* 3 threads, 4 register-prefetch persistent, 8 cp.async ring */
	assert_int_equal(fn->candidates(n, &h, c, LG_MAX_CANDIDATES), 15);
	assert_int_equal(c[5].v[NT("threads")], 128);
	assert_int_equal(c[5].v[NT("per_sm")], 4);
	assert_int_equal(c[6].v[NT("threads")], 256);
	assert_int_equal(c[6].v[NT("prefetch")], 1);
	assert_int_equal(c[6].v[NT("per_sm")], 2);
	assert_int_equal(c[7].v[NT("stages")], 2);
	assert_int_equal(c[7].v[NT("per_sm")], 2);
	assert_int_equal(c[14].v[NT("threads")], 256);
	assert_int_equal(c[14].v[NT("stages")], 3);
	/* 4 threads, with and without prefetch, 4 cp.async ring */
	assert_int_equal(fn->candidates(b, &h, c, LG_MAX_CANDIDATES), 12);
	assert_int_equal(c[3].v[NT("threads")], 1024);
	assert_int_equal(c[3].v[NT("prefetch")], 0);
	assert_int_equal(c[7].v[NT("threads")], 1024);
	assert_int_equal(c[7].v[NT("prefetch")], 1);
	assert_int_equal(c[8].v[NT("stages")], 3);
	assert_int_equal(c[11].v[NT("threads")], 256);
	lg_spec_free(q);
	lg_spec_free(n);
	lg_spec_free(b);
	lg_spec_free(big);
}

/* The FP8 GEMMs' candidates: at most LG_MAX_CANDIDATES, each valid (the
 * test above's loop), tile.pingpong among the dense forward's (128 rows),
 * not the grouped wgrad's (its 64-row form measured far behind; the 128-row
 * one is not valid there). */
static int pingpong_rows(enum lg_op op, const char *json)
{
	const struct lg_family *f = lg_family_get(op);
	const int pp = lg_family_key(f, "tile.pingpong"), tm = lg_family_key(f, "tile.m");
	struct lg_target tg;
	struct lg_tile_choice c[LG_MAX_CANDIDATES];
	assert_true(lg_target_parse("sm_90a", &tg));
	lg_spec *s = spec(json);
	int n = f->candidates(s, &tg, c, LG_MAX_CANDIDATES), rows = 0;
	assert_true(n >= 3 && n <= LG_MAX_CANDIDATES);
	for (int k = 0; k < n; k++) {
		struct lg_spec v;
		struct lg_plan p;
		assert_int_equal(lg_spec_with_tile(s, &c[k], &v), LG_OK);
		assert_int_equal(lg_plan_for(&v, &tg, &p), LG_OK);
		if (c[k].set & (uint64_t)1 << pp && c[k].v[pp] == 1)
			rows = p.tile[tm];
	}
	lg_spec_free(s);
	return rows;
}

static void test_fp8_candidates(void **state)
{
	(void)state;
	assert_int_equal(pingpong_rows(LG_OP_FP8_GEMM, "{\"op\": \"fp8_gemm\", \"pass\": \"forward\", "
				       "\"dtype\": \"bf16\", \"n\": 3072, \"k\": 2048}"), 128);
	assert_int_equal(pingpong_rows(LG_OP_FP8_GROUPED_GEMM, "{\"op\": \"fp8_grouped_gemm\", \"pass\": "
				       "\"wgrad\", \"dtype\": \"bf16\", \"experts\": 256, \"n\": 1024, \"k\": 2048}"),
			 0);
}

/* Every shipped configs/tuning/<arch>.json parses for its arch. */
static void test_shipped(void **state)
{
	(void)state;
	size_t count = 0;
	char **files = lg_test_list_dir(LG_SOURCE_DIR "/configs/tuning", ".json", &count);
	for (size_t i = 0; files && files[i]; i++) {
		const char *base = strrchr(files[i], '/') + 1;
		char arch[32];
		snprintf(arch, sizeof arch, "%.*s", (int)(strlen(base) - 5), base);
		struct lg_tuning *t = NULL;
		lg_status st = lg_tuning_load(files[i], arch, false, &t);
		if (st != LG_OK)
			fail_msg("%s", lg_last_error());
		fprintf(stderr, "%s: %zu entries\n", files[i], t->n);
		lg_tuning_free(t);
	}
	lg_test_free_list(files);
}

/* `lingen tune` needs a GPU: exit 1 with a message without one (even with
 * LINGEN_ARCH set); bad usage exits 2. */
static void test_cli_no_gpu(void **state)
{
	(void)state;
	char *const argv[] = {(char *)LG_CLI, (char *)"tune",
			      (char *)LG_SOURCE_DIR "/configs/kernels/ling-mini-2.0-norms.json", NULL};
	char *const env[] = {(char *)"CUDA_VISIBLE_DEVICES=-1", (char *)"LINGEN_ARCH=sm_90a", NULL};
	struct lg_proc p;
	assert_int_equal(lg_proc_run(argv, env, &p), 0);
	fprintf(stderr, "%s", p.err);
	assert_int_equal(p.status, 1);
	assert_non_null(strstr(p.err, "tune needs a CUDA GPU and its driver"));
	lg_proc_free(&p);
	char *const usage[] = {(char *)LG_CLI, (char *)"tune", (char *)"--reps", (char *)"0",
			       (char *)LG_SOURCE_DIR "/configs/kernels/ling-mini-2.0-norms.json", NULL};
	assert_int_equal(lg_proc_run(usage, env, &p), 0);
	assert_int_equal(p.status, 2);
	lg_proc_free(&p);
	char *const help[] = {(char *)LG_CLI, (char *)"help", (char *)"tune", NULL};
	assert_int_equal(lg_proc_run(help, NULL, &p), 0);
	assert_int_equal(p.status, 0);
	assert_non_null(strstr(p.out, "configs/tuning/<arch>.json"));
	lg_proc_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_good),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_context_cubin),
		cmocka_unit_test(test_bad_file_stops_context),
		cmocka_unit_test(test_candidates),
		cmocka_unit_test(test_fp8_candidates),
		cmocka_unit_test(test_shipped),
		cmocka_unit_test(test_cli_no_gpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
