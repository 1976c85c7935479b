// emu_io.h - the global loads and stores of templates/vec.cuh for the
// emulator (cut.py includes it after the kept helpers): plain copies,
// checked for their alignment.
static inline lg_u32x4 lg_ld16_any_(const void *p) { if ((uintptr_t)p % 16) abort(); lg_u32x4 v; memcpy(&v, p, 16); return v; }
static inline lg_u32x4 lg_ld16_keep(const void *p) { return lg_ld16_any_(p); }
static inline lg_u32x4 lg_ld16_cs(const void *p) { return lg_ld16_any_(p); }
static inline u64 lg_policy_evict_last(void) { return 0; }
static inline lg_u32x4 lg_ld16_last(const void *p, u64) { return lg_ld16_any_(p); }
static inline void lg_st16_cs(void *p, lg_u32x4 v) { if ((uintptr_t)p % 16) abort(); memcpy(p, &v, 16); }
static inline void lg_st8_cs(void *p, u32 a, u32 b) { if ((uintptr_t)p % 8) abort(); memcpy(p, &a, 4); memcpy((u8 *)p + 4, &b, 4); }
static inline lg_u32x4 lg_ld16(const void *p) { return lg_ld16_any_(p); }
static inline void lg_st16(void *p, lg_u32x4 v) { if ((uintptr_t)p % 16) abort(); memcpy(p, &v, 16); }
