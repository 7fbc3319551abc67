/*
 * response_cache.c — see response_cache.h.
 */
#include "response_cache.h"

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

long response_cache_find(const struct response_cache *cache, const struct wire_request *request)
{
    uintptr_t slot_plus_one = (uintptr_t)name_table_find(&cache->slots, request->name);
    if (slot_plus_one == 0)
        return -1;
    const struct wire_request *entry = &cache->entries[slot_plus_one - 1];
    return wire_request_equal(entry, request) ? (long)(slot_plus_one - 1) : -1;
}

const struct wire_request *response_cache_get(const struct response_cache *cache, uint32_t slot)
{
    return slot < cache->count ? &cache->entries[slot] : NULL;
}

bool response_cacheable(const struct wire_response *response, int nranks)
{
    return response->type == RESPONSE_EXECUTE &&
           response->request.collective != CHORUS_ALLGATHER &&
           response->contributors == (uint32_t)nranks;
}

bool response_cache_record(struct response_cache *cache, const struct wire_response *response,
                           int nranks)
{
    if (!response_cacheable(response, nranks) || cache->count >= cache->capacity ||
        name_table_find(&cache->slots, response->request.name) != NULL)
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
    if (!name_table_insert(&cache->slots, entry->name, (void *)(uintptr_t)(cache->count + 1))) {
        wire_request_free(entry);
        return false;
    }
    cache->count++;
    return true;
}
