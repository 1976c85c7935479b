/*
 * plan_record.c - a plan and a cubin as a bundle records them (bundle.h):
 * the plan as the manifest's JSON (lg_plan_to_json) and as index.lgb's
 * digest (lg_plan_digest), its given tile (lg_plan_given_json) and the
 * cubin's checksum (lg_bundle_checksum). Written by lingen build and aot,
 * made again by the loader (bundle.c) to compare with what it reads.
 */
#include "bundle.h"

#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"
#include "generate.h"
#include "hash.h"

/* ------------------------------------------------------------ plan <-> JSON */

/* cJSON's adders fail quietly (out of memory): each result goes through
 * one of these, which clear *ok on a failure, so the tree is known whole
 * without printing it. */
static cJSON *made(cJSON *item, bool *ok)
{
	*ok = *ok && item;
	return item;
}

/* Attach item (NULL: a failure already) to o under key; freed if it cannot be. */
static void add_item(cJSON *o, const char *key, cJSON *item, bool *ok)
{
	if (!item) {
		*ok = false;
	} else if (!cJSON_AddItemToObject(o, key, item)) {
		*ok = false;
		cJSON_Delete(item);
	}
}

/* Append item (NULL: a failure already) to array a; false (item freed) when not appended. */
static bool append(cJSON *a, cJSON *item, bool *ok)
{
	if (item && cJSON_AddItemToArray(a, item))
		return true;
	*ok = false;
	cJSON_Delete(item);
	return false;
}

static void add_num(cJSON *o, const char *key, double v, bool *ok) { made(cJSON_AddNumberToObject(o, key, v), ok); }

static cJSON *int_array(const int64_t *v, int n, bool *ok)
{
	cJSON *a = made(cJSON_CreateArray(), ok);
	for (int i = 0; a && i < n; i++) {
		append(a, cJSON_CreateNumber((double)v[i]), ok);
	}
	return a;
}

static cJSON *dim3(const unsigned v[3], bool *ok)
{
	int64_t w[3] = {v[0], v[1], v[2]};
	return int_array(w, 3, ok);
}

static void add_entry(cJSON *entries, const struct lg_family *f, enum lg_pass pass, const struct lg_plan *p,
		      int e, bool *ok)
{
	struct lg_launch_dim d1, d8k;
	int64_t s1[LG_MAX_SIZES], s8k[LG_MAX_SIZES];
	lg_sizes_at(f, pass, 1, s1);
	lg_sizes_at(f, pass, 8192, s8k);
	f->geometry(p, e, s1, &d1);
	f->geometry(p, e, s8k, &d8k);
	cJSON *o = cJSON_CreateObject();
	if (!append(entries, o, ok))
		return;
	made(cJSON_AddStringToObject(o, "name", p->entry[e]), ok);
	add_item(o, "block", dim3(d1.block, ok), ok);
	add_num(o, "smem", d1.smem, ok);
	add_num(o, "cluster", p->cluster[e], ok);
	made(cJSON_AddBoolToObject(o, "persistent", p->persistent[e]), ok);
	add_num(o, "per_sm", p->per_sm[e], ok);
	made(cJSON_AddBoolToObject(o, "early", p->early[e]), ok);
	add_num(o, "part", (double)p->part[e], ok);
	add_item(o, "grid_at_1", dim3(d1.grid, ok), ok);
	add_item(o, "grid_at_8192", dim3(d8k.grid, ok), ok);
}

/* The tile keys of f set in `set` with their values, by name. */
static cJSON *tile_object(const struct lg_family *f, const int64_t *v, uint64_t set, bool *ok)
{
	cJSON *o = made(cJSON_CreateObject(), ok);
	for (int k = 0; o && k < f->nkeys; k++)
		if (lg_key_is_tile(&f->keys[k]) && ((set >> k) & 1u))
			add_num(o, f->keys[k].path + 5, (double)v[k], ok);
	return o;
}

static void add_tmaps(cJSON *o, const struct lg_spec *s, const struct lg_plan *p, bool *ok)
{
	cJSON *maps = made(cJSON_AddArrayToObject(o, "tmaps"), ok);
	for (int i = 0; maps && i < p->ntmaps; i++) {
		const struct lg_tmap_decl *m = &p->tmap[i];
		cJSON *t = cJSON_CreateObject();
		if (!append(maps, t, ok))
			break;
		made(cJSON_AddStringToObject(t, "arg", s->fam->sig[s->pass].args[m->arg].name), ok);
		int64_t box[2] = {m->box[0], m->box[1]};
		add_item(t, "box", int_array(box, 2, ok), ok);
		add_num(t, "swizzle", m->swizzle, ok);
		if (m->cols) /* a row's elements, in the pitch of the shape's last dimension */
			made(cJSON_AddStringToObject(t, "cols", m->cols), ok);
	}
}

cJSON *lg_plan_to_json(const struct lg_spec *s, const struct lg_plan *p)
{
	const struct lg_family *f = s->fam;
	uint64_t tiles = 0;
	for (int k = 0; k < f->nkeys; k++)
		if (lg_key_is_tile(&f->keys[k]))
			tiles |= (uint64_t)1 << k;
	bool ok = true;
	cJSON *o = made(cJSON_CreateObject(), &ok);
	if (!o)
		return NULL;
	add_item(o, "given", tile_object(f, p->given.v, p->given.set, &ok), &ok);
	add_item(o, "tile", tile_object(f, p->tile, tiles, &ok), &ok);
	int64_t used[LG_MAX_ARGS];
	for (int i = 0; i < p->nargs; i++)
		used[i] = p->used[i];
	add_item(o, "used", int_array(used, p->nargs, &ok), &ok);
	cJSON *entries = made(cJSON_AddArrayToObject(o, "entries"), &ok);
	for (int e = 0; entries && e < p->nentries; e++)
		add_entry(entries, f, s->pass, p, e, &ok);
	if (p->ntmaps > 0) /* the TMA tensor maps the launch builds */
		add_tmaps(o, s, p, &ok);
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* Bytes the plan digest is taken over: integers as 8 bytes little-endian,
 * strings as their length and bytes; sized for the largest plan. */
struct digest_buf {
	uint8_t b[LG_MAX_ENTRIES * (160 + 24 * 8) + LG_MAX_KEYS * 24 + LG_MAX_ARGS * 8 +
		  LG_MAX_TMAPS * (64 + 6 * 8) + 256];
	size_t n;
	bool over;
};

static void dig_u64(struct digest_buf *d, uint64_t v)
{
	if (d->n + 8 > sizeof d->b) {
		d->over = true;
		return;
	}
	for (int i = 0; i < 8; i++)
		d->b[d->n++] = (uint8_t)(v >> (8 * i));
}

static void dig_str(struct digest_buf *d, const char *s)
{
	size_t n = strlen(s);
	dig_u64(d, n);
	if (d->n + n > sizeof d->b) {
		d->over = true;
		return;
	}
	memcpy(d->b + d->n, s, n);
	d->n += n;
}

uint64_t lg_plan_digest(const struct lg_spec *s, const struct lg_plan *p)
{
	const struct lg_family *f = s->fam;
	struct digest_buf d = {.n = 0};
	dig_str(&d, "lingen plan digest 1");
	for (int k = 0; k < f->nkeys; k++) {
		if (!lg_key_is_tile(&f->keys[k]))
			continue;
		bool given = (p->given.set >> k) & 1u;
		dig_u64(&d, (uint64_t)k);
		dig_u64(&d, given);
		dig_u64(&d, given ? (uint64_t)p->given.v[k] : 0);
		dig_u64(&d, (uint64_t)p->tile[k]);
	}
	dig_u64(&d, (uint64_t)p->nargs);
	for (int i = 0; i < p->nargs && i < LG_MAX_ARGS; i++)
		dig_u64(&d, p->used[i]);
	int64_t s1[LG_MAX_SIZES], s8k[LG_MAX_SIZES];
	lg_sizes_at(f, s->pass, 1, s1);
	lg_sizes_at(f, s->pass, 8192, s8k);
	dig_u64(&d, (uint64_t)p->nentries);
	for (int e = 0; e < p->nentries && e < LG_MAX_ENTRIES; e++) {
		struct lg_launch_dim d1, d8k;
		f->geometry(p, e, s1, &d1);
		f->geometry(p, e, s8k, &d8k);
		dig_str(&d, p->entry[e]);
		for (int i = 0; i < 3; i++) {
			dig_u64(&d, d1.block[i]);
			dig_u64(&d, d1.grid[i]);
			dig_u64(&d, d8k.grid[i]);
		}
		dig_u64(&d, d1.smem);
		dig_u64(&d, p->cluster[e]);
		dig_u64(&d, p->persistent[e]);
		dig_u64(&d, p->per_sm[e]);
		dig_u64(&d, p->early[e]);
		dig_u64(&d, (uint64_t)p->part[e]);
	}
	dig_u64(&d, (uint64_t)p->ntmaps);
	for (int i = 0; i < p->ntmaps && i < LG_MAX_TMAPS; i++) {
		const struct lg_tmap_decl *m = &p->tmap[i];
		dig_u64(&d, (uint64_t)m->arg);
		dig_u64(&d, m->box[0]);
		dig_u64(&d, m->box[1]);
		dig_u64(&d, (uint64_t)m->swizzle);
		dig_str(&d, m->cols ? m->cols : "");
		dig_u64(&d, m->patched);
	}
	dig_u64(&d, (uint64_t)p->sass_ffma);
	LG_ASSERT(!d.over);
	return XXH3_64bits(d.b, d.n);
}

char *lg_plan_given_json(const struct lg_spec *s, const struct lg_plan *p)
{
	bool ok = true;
	cJSON *o = tile_object(s->fam, p->given.v, p->given.set, &ok);
	char *text = o && ok ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	return text;
}

uint64_t lg_bundle_checksum(const char *canon, const char *entry, const char *arch, const char *given,
			    const void *cubin, size_t size)
{
	XXH3_state_t st;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, canon, strlen(canon) + 1);
	XXH3_64bits_update(&st, entry, strlen(entry) + 1);
	XXH3_64bits_update(&st, arch, strlen(arch) + 1);
	XXH3_64bits_update(&st, given, strlen(given) + 1);
	return lg_hash64_seeded(cubin, size, XXH3_64bits_digest(&st)); /* hash.h: AVX2 where there is */
}
