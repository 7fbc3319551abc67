/*
 * response_cache.h — agreed tensor descriptions, kept identically on every rank, so that a
 * training step that submits the same tensors as before sends each as a 4-byte slot number
 * instead of its full description, in both directions.
 *
 * Every rank inserts into the cache in the same order: the order of the full EXECUTE responses
 * rank 0 sends (rank 0 when it sends them, the others when they receive them). A name keeps its
 * slot: when it runs with a new description (a tensor that changed shape), that description
 * replaces the old one there. Nothing is evicted; a full cache stops caching new names. So a
 * slot a rank refers to means the same description on rank 0, which is always at least as far
 * along in the response stream.
 */
#ifndef CHORUS_RESPONSE_CACHE_H
#define CHORUS_RESPONSE_CACHE_H

#include "../core/name_table.h"
#include "wire.h"

struct response_cache {
    size_t capacity;
    size_t count;
    struct wire_request *entries;
    struct name_table slots; /* name -> slot + 1 (as a pointer-sized integer) */
};

void response_cache_init(struct response_cache *cache, size_t capacity);
void response_cache_destroy(struct response_cache *cache);

/* The slot holding exactly `request`, or -1. */
long response_cache_find(const struct response_cache *cache, const struct wire_request *request);

/* The slot holding the request's name (in its set), whatever its description, or -1. */
long response_cache_slot_of(const struct response_cache *cache, const struct wire_request *request);

/* The entry of `slot`, or NULL when the slot is empty. */
const struct wire_request *response_cache_get(const struct response_cache *cache, uint32_t slot);

/* Records the description of a full EXECUTE response, if it may be cached: in its name's slot
 * when the name is known (its description replaced), else in a new one if there is room.
 * Returns true if the cache changed. */
bool response_cache_record(struct response_cache *cache, const struct wire_response *response,
                           int nranks);

/* Rank 0: the form in which `response` travels to the other ranks: its slot where the cache
 * holds it (a shallow copy, sharing the response's strings), else in full, recorded in the
 * cache, as every rank then records it in the same order. */
struct wire_response response_cache_outgoing(struct response_cache *cache,
                                             const struct wire_response *response, int nranks);

/* The other ranks: a response received from rank 0. A slot becomes the cached description (false
 * when the slot is empty, *empty_slot then true, or memory ran out); one in full is recorded. */
bool response_cache_incoming(struct response_cache *cache, struct wire_response *response,
                             int nranks, bool *empty_slot);

/* Makes `response` an EXECUTE of slot `slot`'s description by all `nranks` ranks (its request
 * replaced by a copy of the entry). False when the slot is empty or memory ran out. */
bool response_cache_expand(const struct response_cache *cache, uint32_t slot, int nranks,
                           struct wire_response *response);
/* The same without a copy: `response`'s request points into the entry, so it is valid while the
 * cache is not changed, and is not freed (no wire_response_free). False when the slot is
 * empty. For running a round's slots, during which nothing records into the cache. */
bool response_cache_view(const struct response_cache *cache, uint32_t slot, int nranks,
                         struct wire_response *response);

/* Whether a response of this shape goes into the cache (or may be sent as a slot): allreduces and
 * broadcasts that every rank contributed to. Allgathers are not cached: their first dimensions
 * change from call to call. */
bool response_cacheable(const struct wire_response *response, int nranks);

#endif
