/*
 * common.h — small helpers every part of the library uses, each named for its module: error
 * reporting to the calling thread (status.c), formatted allocation (text.c), clocks (clock.c),
 * and the dtype table (dtype.c). Nothing here touches MPI.
 */
#ifndef CHORUS_COMMON_H
#define CHORUS_COMMON_H

#define CHORUS_BUILDING_LIBRARY 1
#include "chorus.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define CHORUS_INTERNAL __attribute__((visibility("hidden")))
#define CHORUS_PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))

#define ARRAY_LENGTH(array) (sizeof(array) / sizeof((array)[0]))

/* Splits `count` items into `parts` nearly equal contiguous parts: part i starts at
 * part_start(i) and the first count % parts parts have one more item (Horovod's split of a
 * reducescatter's rows). */
static inline size_t part_start(size_t count, size_t parts, size_t index)
{
    size_t base = count / parts, extra = count % parts;
    return index * base + (index < extra ? index : extra);
}

static inline size_t part_length(size_t count, size_t parts, size_t index)
{
    return count / parts + (index < count % parts ? 1 : 0);
}

/* The device of a host tensor in negotiation messages (CUDA devices are 0, 1, ...). */
#define DEVICE_HOST (-1)

/* Longest tensor name accepted (bytes, without the terminating zero). */
#define CHORUS_MAX_NAME_LENGTH 1023

/* status.c: records why a call failed on this thread (see chorus_last_error) and returns
 * `status`. */
chorus_status status_set_last_error(chorus_status status, const char *format, ...) CHORUS_PRINTF(2, 3);
void status_clear_last_error(void);

/* text.c: malloc'd printf; NULL when out of memory. */
char *text_format(const char *format, ...) CHORUS_PRINTF(1, 2);
char *text_format_va(const char *format, va_list args);

/* Appends to a growing malloc'd string. Keeps the old text when out of memory. */
void text_append(char **text, const char *format, ...) CHORUS_PRINTF(2, 3);

/* Writes ranks as compact ranges, e.g. "0-2,5" for {0,1,2,5}, into a malloc'd string. */
char *text_rank_list(const int *ranks, size_t count);
/* 64-bit FNV-1a of `length` bytes: the same on every rank (whether two ranks hold the same
 * text; a tensor's stream of random numbers). */
uint64_t text_digest(const void *bytes, size_t length);

/* clock.c: seconds on a monotonic clock. */
double clock_seconds(void);
/* The time `seconds` from now on `clock`, as pthread_cond_timedwait takes it. */
struct timespec clock_deadline(clockid_t clock, double seconds);

/* dtype.c: true for values inside the enums. */
bool dtype_is_valid(int dtype);
bool dtype_op_is_valid(int op);
bool dtype_collective_is_valid(int collective);
bool dtype_is_floating(chorus_dtype dtype);
/* "none", "fp16", "bf16", "int8", "int4", "topk" ("default" for CHORUS_COMPRESSION_DEFAULT). */
const char *dtype_compression_name(int compression);
/* The largest chorus_compression. */
#define DTYPE_COMPRESSION_LAST CHORUS_COMPRESSION_TOPK
/* Whether `compression` quantizes (INT8, INT4), and to how many bits (0: it does not). */
unsigned dtype_compression_bits(int compression);
/* Whether `compression` sends shares of a sum that only add up (INT8, INT4, TOPK): it takes
 * SUM and AVERAGE alone, as a minimum or a product of shares means nothing. */
bool dtype_compression_sums_only(int compression);
/* Whether a tensor of `dtype` travels compressed by `compression`: float32 by any; float16 and
 * bfloat16 by the lossy ones (INT8, INT4, TOPK, computed in float32), as they are 16 bits
 * already. */
bool dtype_compression_applies(chorus_dtype dtype, int compression);

#endif
