/*
 * streaming_copy.c — see streaming_copy.h. SSE2's 16-byte streaming store is part of every
 * x86-64 CPU, so no dispatch by CPU features is needed; elsewhere memcpy stands in.
 */
#include "streaming_copy.h"

#include <string.h>

void streaming_copy_cached(void *to, const void *from, size_t bytes)
{
    memcpy(to, from, bytes);
}

#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>

void streaming_copy_nontemporal(void *to, const void *from, size_t bytes)
{
    unsigned char *target = to;
    const unsigned char *source = from;
    /* Up to the first 16-byte boundary of the target, and the tail, go through the cache. */
    size_t head = (16 - ((uintptr_t)target & 15)) & 15;
    head = head < bytes ? head : bytes;
    memcpy(target, source, head);
    target += head;
    source += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, target += 64, source += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)source);
        __m128i b = _mm_loadu_si128((const __m128i *)(source + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(source + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(source + 48));
        _mm_stream_si128((__m128i *)target, a);
        _mm_stream_si128((__m128i *)(target + 16), b);
        _mm_stream_si128((__m128i *)(target + 32), c);
        _mm_stream_si128((__m128i *)(target + 48), d);
    }
    for (; bytes >= 16; bytes -= 16, target += 16, source += 16)
        _mm_stream_si128((__m128i *)target, _mm_loadu_si128((const __m128i *)source));
    memcpy(target, source, bytes);
}

void streaming_copy_fence(void)
{
    _mm_sfence();
}

#else
#include <stdatomic.h>

void streaming_copy_nontemporal(void *to, const void *from, size_t bytes)
{
    memcpy(to, from, bytes);
}

void streaming_copy_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

#endif
