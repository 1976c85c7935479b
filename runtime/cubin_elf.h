/*
 * cubin_elf.h - the symbols of a cubin (a 64-bit little-endian ELF): what
 * `lingen build` checks of a linked module before it ships it (every entry
 * point of its kernels defined in it), and the tests with it.
 */
#ifndef LG_RUNTIME_CUBIN_ELF_H
#define LG_RUNTIME_CUBIN_ELF_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the cubin (size bytes) defines a function named name (a kernel
 * entry point: a symbol of type STT_FUNC in a section); false too when it
 * is not a 64-bit little-endian ELF whose symbol table lies within size. */
bool lg_cubin_has_function(const void *cubin, size_t size, const char *name);

#endif
