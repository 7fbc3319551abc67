/*
 * check.c — the measuring's own check of the data it moves (measure.h): small whole numbers
 * from (seed, rank, index), whose sums over the ranks are exact in every dtype, so a result is
 * right or wrong bit for bit. The tests (test/common/reference.c) check every collective far
 * more thoroughly; this is what nccl-tests' #wrong column is for: a benchmark that measured
 * a broken path says so.
 */
#include "measure.h"

#include <string.h>

/* A value from (seed, rank, index): splitmix64 of the three. */
static uint64_t mix(uint64_t seed, uint64_t rank, uint64_t index)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL ^ rank * 0xbf58476d1ce4e5b9ULL ^ index;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The largest value an element takes at `nranks`: sums stay within int8's 127 and bfloat16's
 * exact integers (256). */
static unsigned largest_value(int nranks)
{
    return nranks <= 40 ? 3 : 1;
}

static unsigned value_at(uint64_t seed, int rank, size_t index, int nranks, chorus_dtype dtype)
{
    unsigned top = dtype == CHORUS_BOOL ? 1 : largest_value(nranks);
    return (unsigned)(mix(seed, (uint64_t)rank, index) % (top + 1));
}

/* A whole number from 0 to 2048 in binary16: exact. */
static uint16_t half_of(unsigned k)
{
    if (k == 0)
        return 0;
    unsigned e = 0;
    while ((2u << e) <= k)
        e++;
    return (uint16_t)(((e + 15) << 10) | ((k - (1u << e)) << (10 - e)));
}

static unsigned from_half(uint16_t bits)
{
    if (bits == 0)
        return 0;
    unsigned e = ((bits >> 10) & 31u) - 15;
    return (1u << e) + ((bits & 1023u) >> (10 - e));
}

static void store(void *buffer, size_t index, chorus_dtype dtype, unsigned k)
{
    float f = (float)k;
    uint32_t bits;
    switch (dtype) {
    case CHORUS_UINT8:
    case CHORUS_INT8:
    case CHORUS_BOOL:
        ((uint8_t *)buffer)[index] = (uint8_t)k;
        return;
    case CHORUS_INT16:
    case CHORUS_UINT16:
        ((uint16_t *)buffer)[index] = (uint16_t)k;
        return;
    case CHORUS_INT32:
        ((int32_t *)buffer)[index] = (int32_t)k;
        return;
    case CHORUS_INT64:
        ((int64_t *)buffer)[index] = (int64_t)k;
        return;
    case CHORUS_FLOAT16:
        ((uint16_t *)buffer)[index] = half_of(k);
        return;
    case CHORUS_BFLOAT16:
        memcpy(&bits, &f, sizeof bits);
        ((uint16_t *)buffer)[index] = (uint16_t)(bits >> 16);
        return;
    case CHORUS_FLOAT32:
        ((float *)buffer)[index] = f;
        return;
    case CHORUS_FLOAT64:
        ((double *)buffer)[index] = (double)k;
        return;
    }
}

/* The element as a whole number; UINT32_MAX for a value no store() could have made. */
static uint32_t load(const void *buffer, size_t index, chorus_dtype dtype)
{
    uint32_t bits;
    float f;
    double d;
    switch (dtype) {
    case CHORUS_UINT8:
    case CHORUS_INT8:
    case CHORUS_BOOL:
        return ((const uint8_t *)buffer)[index];
    case CHORUS_INT16:
    case CHORUS_UINT16:
        return ((const uint16_t *)buffer)[index];
    case CHORUS_INT32:
        return (uint32_t)((const int32_t *)buffer)[index];
    case CHORUS_INT64:
        return (uint32_t)((const int64_t *)buffer)[index];
    case CHORUS_FLOAT16:
        return from_half(((const uint16_t *)buffer)[index]);
    case CHORUS_BFLOAT16:
        bits = (uint32_t)((const uint16_t *)buffer)[index] << 16;
        memcpy(&f, &bits, sizeof f);
        return f >= 0 && f == (float)(uint32_t)f ? (uint32_t)f : UINT32_MAX;
    case CHORUS_FLOAT32:
        f = ((const float *)buffer)[index];
        return f >= 0 && f == (float)(uint32_t)f ? (uint32_t)f : UINT32_MAX;
    case CHORUS_FLOAT64:
        d = ((const double *)buffer)[index];
        return d >= 0 && d == (double)(uint32_t)d ? (uint32_t)d : UINT32_MAX;
    }
    return UINT32_MAX;
}

void measure_check_fill(void *buffer, size_t count, chorus_dtype dtype, uint64_t seed, int rank,
                        int nranks)
{
    for (size_t i = 0; i < count; i++)
        store(buffer, i, dtype, value_at(seed, rank, i, nranks, dtype));
}

long measure_check_sum(const void *result, size_t first, size_t count, chorus_dtype dtype,
                       int nranks, uint64_t seed)
{
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t expected = 0;
        for (int r = 0; r < nranks; r++)
            expected += value_at(seed, r, first + i, nranks, dtype);
        if (dtype == CHORUS_BOOL)
            expected = expected != 0; /* a sum of bools is "any" */
        wrong += load(result, i, dtype) != expected;
    }
    return wrong;
}

void measure_check_fill_bytes(void *buffer, size_t bytes, uint64_t seed, int rank)
{
    for (size_t i = 0; i < bytes; i++)
        ((unsigned char *)buffer)[i] = (unsigned char)mix(seed, (uint64_t)rank, i);
}

long measure_check_bytes(const void *buffer, size_t bytes, uint64_t seed, int rank)
{
    long wrong = 0;
    for (size_t i = 0; i < bytes; i++)
        wrong += ((const unsigned char *)buffer)[i] != (unsigned char)mix(seed, (uint64_t)rank, i);
    return wrong;
}
