/*
 * streaming_copy.h — copies whose stores bypass the caches (non-temporal stores), for staging
 * areas that another core reads next, beside the ordinary copy with the same signature. See
 * node_segment.h for when they pay off.
 */
#ifndef CHORUS_STREAMING_COPY_H
#define CHORUS_STREAMING_COPY_H

#include "../core/common.h"

/* A copy of `bytes` from `from` to `to` (which must not overlap). */
typedef void (*copy_function)(void *to, const void *from, size_t bytes);

/* With streaming stores; where the CPU has no such stores it is memcpy. */
void streaming_copy_nontemporal(void *to, const void *from, size_t bytes);
/* With ordinary stores: memcpy. */
void streaming_copy_cached(void *to, const void *from, size_t bytes);

/* Orders the streaming stores before every later store (they are weakly ordered): call it
 * before publishing their data, for example by arriving at a barrier. */
void streaming_copy_fence(void);

#endif
