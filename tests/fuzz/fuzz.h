/*
 * fuzz.h - what the libFuzzer harnesses share: the entry point's
 * prototype, a check that aborts (so libFuzzer records the input), and the
 * round trip every accepted spec must survive.
 */
#ifndef LG_FUZZ_H
#define LG_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lingen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LG_FUZZ_CHECK(c)                                                                    \
	do {                                                                                \
		if (!(c)) {                                                                 \
			fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #c, \
				lg_last_error());                                           \
			abort();                                                            \
		}                                                                           \
	} while (0)

/* An accepted spec: its canonical JSON parses back to the same canonical
 * JSON and entry, and it plans (or is refused as unsupported) for sm_90a. */
void lg_fuzz_spec_roundtrip(const lg_spec *s);

#endif
