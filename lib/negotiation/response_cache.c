/*
 * response_cache.c — see response_cache.h.
 */
#include "response_cache.h"

#include "negotiated_fields.h"

#include <stdlib.h>
#include <string.h>

void response_cache_init(struct response_cache *cache, size_t capacity)
{
    memset(cache, 0, sizeof *cache);
    cache->capacity = capacity;
    name_table_init(&cache->slots);
}

void response_cache_destroy(struct response_cache *cache)
{
    for (size_t i = 0; i < cache->count; i++)
        wire_request_free(&cache->entries[i]);
    free(cache->entries);
    name_table_destroy(&cache->slots);
    memset(cache, 0, sizeof *cache);
}

long response_cache_slot_of(const struct response_cache *cache, const struct wire_request *request)
{
    return (long)(uintptr_t)name_table_find(&cache->slots, request_name_set(request),
                                            request->name) - 1;
}

long response_cache_find(const struct response_cache *cache, const struct wire_request *request)
{
    long slot = response_cache_slot_of(cache, request);
    if (slot < 0)
        return -1;
    return wire_request_equal(&cache->entries[slot], request) ? slot : -1;
}

const struct wire_request *response_cache_get(const struct response_cache *cache, uint32_t slot)
{
    return slot < cache->count ? &cache->entries[slot] : NULL;
}

bool response_cacheable(const struct wire_response *response, int nranks)
{
    /* A process set's tensors wait for its members alone, which a round's bit cannot say. */
    return response->type == RESPONSE_EXECUTE &&
           response->request.collective != CHORUS_ALLGATHER &&
           response->request.collective != COLLECTIVE_PROCESS_SET &&
           response->request.process_set == 0 &&
           response->contributors == (uint32_t)nranks;
}

/* A name already cached whose description changed (a tensor that changed shape): the new
 * description takes the old one's slot. No rank still waits on the old one: a name is in flight
 * once per rank, and this description ran with every rank's submission of it. */
static bool replace(struct response_cache *cache, long slot, const struct wire_request *request)
{
    struct wire_request *entry = &cache->entries[slot];
    if (wire_request_equal(entry, request))
        return false;
    struct wire_request replacement;
    if (!wire_request_copy(&replacement, request))
        return false;
    replacement.cached = false;
    wire_request_free(entry);
    *entry = replacement;
    return true;
}

bool response_cache_record(struct response_cache *cache, const struct wire_response *response,
                           int nranks)
{
    if (!response_cacheable(response, nranks))
        return false;
    long slot = response_cache_slot_of(cache, &response->request);
    if (slot >= 0)
        return replace(cache, slot, &response->request);
    if (cache->count >= cache->capacity)
        return false;
    if (cache->entries == NULL) {
        cache->entries = calloc(cache->capacity, sizeof *cache->entries);
        if (cache->entries == NULL)
            return false;
    }
    struct wire_request *entry = &cache->entries[cache->count];
    if (!wire_request_copy(entry, &response->request))
        return false;
    entry->cached = false;
    if (!name_table_insert(&cache->slots, request_name_set(entry), entry->name,
                           (void *)(uintptr_t)(cache->count + 1))) {
        wire_request_free(entry);
        return false;
    }
    cache->count++;
    return true;
}

struct wire_response response_cache_outgoing(struct response_cache *cache,
                                             const struct wire_response *response, int nranks)
{
    struct wire_response wire = *response;
    long slot =
        response_cacheable(response, nranks) ? response_cache_find(cache, &response->request) : -1;
    if (slot >= 0) {
        wire.type = RESPONSE_CACHED;
        wire.request.cached = true;
        wire.request.cache_slot = (uint32_t)slot;
    } else {
        response_cache_record(cache, response, nranks);
    }
    return wire;
}

bool response_cache_incoming(struct response_cache *cache, struct wire_response *response,
                             int nranks, bool *empty_slot)
{
    *empty_slot = false;
    if (response->type != RESPONSE_CACHED) {
        response_cache_record(cache, response, nranks);
        return true;
    }
    *empty_slot = response_cache_get(cache, response->request.cache_slot) == NULL;
    return response_cache_expand(cache, response->request.cache_slot, nranks, response);
}

bool response_cache_expand(const struct response_cache *cache, uint32_t slot, int nranks,
                           struct wire_response *response)
{
    const struct wire_request *entry = response_cache_get(cache, slot);
    if (entry == NULL || !wire_request_copy(&response->request, entry))
        return false;
    response->type = RESPONSE_EXECUTE;
    response->status = CHORUS_OK;
    response->contributors = (uint32_t)nranks;
    return true;
}

bool response_cache_view(const struct response_cache *cache, uint32_t slot, int nranks,
                         struct wire_response *response)
{
    const struct wire_request *entry = response_cache_get(cache, slot);
    if (entry == NULL)
        return false;
    response->request = *entry;
    response->type = RESPONSE_EXECUTE;
    response->status = CHORUS_OK;
    response->contributors = (uint32_t)nranks;
    return true;
}
