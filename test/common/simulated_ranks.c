/*
 * simulated_ranks.c — see simulated_ranks.h.
 */
#include "simulated_ranks.h"

#include "../../lib/negotiation/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct simulated_rank {
    struct response_cache cache;
    struct ready_rounds rounds;
    struct name_table pending; /* name -> malloc'd struct wire_request */
    struct wire_request *unsent;
    size_t unsent_count;
    size_t unsent_capacity;
    uint32_t unsent_flags;
    uint64_t *vector;
    char **log;
    size_t log_count;
    bool joined;
};

struct simulated_ranks {
    int nranks;
    enum simulated_protocol protocol;
    double demote_after;
    bool keep_logs;
    uint8_t *eviction; /* streamed through before rank 0's share of each cycle */
    size_t eviction_bytes;
    struct simulated_rank *ranks;
    struct negotiator negotiator;
    uint64_t *combined;
    uint64_t *partial;
    char **warnings;
    size_t warning_count;
    struct rank0_work work;
};

/* ----- bookkeeping ------------------------------------------------------------------------ */

static void append_line(char ***lines, size_t *count, char *line)
{
    if (*count % 64 == 0) {
        char **grown = realloc(*lines, (*count + 64) * sizeof **lines);
        if (grown == NULL)
            abort();
        *lines = grown;
    }
    (*lines)[(*count)++] = line;
}

static void queue_unsent(struct simulated_ranks *world, int rank,
                         const struct wire_request *request)
{
    struct simulated_rank *r = &world->ranks[rank];
    if (r->unsent_count == r->unsent_capacity) {
        r->unsent_capacity = r->unsent_capacity ? 2 * r->unsent_capacity : 16;
        r->unsent = realloc(r->unsent, r->unsent_capacity * sizeof *r->unsent);
        if (r->unsent == NULL)
            abort();
    }
    struct wire_request *entry = &r->unsent[r->unsent_count++];
    if (!wire_request_copy(entry, request))
        abort();
    long slot = rank == 0 ? -1 : response_cache_find(&r->cache, request);
    if (slot >= 0) {
        entry->cached = true;
        entry->cache_slot = (uint32_t)slot;
    }
}

struct simulated_ranks *simulated_ranks_create(int nranks, enum simulated_protocol protocol,
                                               size_t cache_capacity, double demote_after)
{
    struct simulated_ranks *world = calloc(1, sizeof *world);
    world->nranks = nranks;
    world->protocol = protocol;
    world->demote_after = demote_after;
    world->keep_logs = true;
    world->ranks = calloc((size_t)nranks, sizeof *world->ranks);
    if (!negotiator_init(&world->negotiator, nranks))
        abort();
    for (int r = 0; r < nranks; r++) {
        struct simulated_rank *rank = &world->ranks[r];
        response_cache_init(&rank->cache, cache_capacity);
        if (!ready_rounds_init(&rank->rounds, cache_capacity))
            abort();
        name_table_init(&rank->pending);
        rank->vector = calloc(ready_rounds_vector_words(&rank->rounds), sizeof(uint64_t));
    }
    size_t words = ready_rounds_vector_words(&world->ranks[0].rounds);
    world->combined = calloc(words, sizeof(uint64_t));
    world->partial = calloc(words * 32, sizeof(uint64_t)); /* a step per bit of nranks */
    return world;
}

void simulated_ranks_destroy(struct simulated_ranks *world)
{
    for (int r = 0; r < world->nranks; r++) {
        struct simulated_rank *rank = &world->ranks[r];
        for (size_t b = 0; b < rank->pending.bucket_count; b++)
            for (struct name_entry *e = rank->pending.buckets[b]; e != NULL; e = e->next) {
                wire_request_free(e->value);
                free(e->value);
            }
        name_table_destroy(&rank->pending);
        for (size_t i = 0; i < rank->unsent_count; i++)
            wire_request_free(&rank->unsent[i]);
        free(rank->unsent);
        for (size_t i = 0; i < rank->log_count; i++)
            free(rank->log[i]);
        free(rank->log);
        free(rank->vector);
        ready_rounds_destroy(&rank->rounds);
        response_cache_destroy(&rank->cache);
    }
    for (size_t i = 0; i < world->warning_count; i++)
        free(world->warnings[i]);
    free(world->warnings);
    free(world->ranks);
    free(world->combined);
    free(world->partial);
    free(world->eviction);
    negotiator_destroy(&world->negotiator);
    free(world);
}

void simulated_submit(struct simulated_ranks *world, int rank, const struct wire_request *request,
                      double now)
{
    struct simulated_rank *r = &world->ranks[rank];
    struct wire_request *copy = calloc(1, sizeof *copy);
    if (copy == NULL || !wire_request_copy(copy, request))
        abort();
    if (!name_table_insert(&r->pending, request_name_set(request), request->name, copy)) {
        /* chorus_allreduce refuses a name in flight (CHORUS_ERR_DUPLICATE_NAME) before it gets
         * this far; the log shows the refusal. */
        append_line(&r->log, &r->log_count, text_format("duplicate %s", request->name));
        wire_request_free(copy);
        free(copy);
        return;
    }
    enum round_route route = world->protocol == SIMULATED_ROUNDS
                                 ? ready_rounds_route(&r->rounds, &r->cache, request, now)
                                 : ROUTE_STAR;
    if (route != ROUTE_BIT)
        queue_unsent(world, rank, request);
}

void simulated_join(struct simulated_ranks *world, int rank)
{
    world->ranks[rank].unsent_flags |= WIRE_FLAG_JOIN;
    world->ranks[rank].joined = true;
    world->ranks[rank].rounds.joined = world->protocol == SIMULATED_ROUNDS;
}

/* ----- running what was agreed -------------------------------------------------------------- */

static void run(struct simulated_ranks *world, int rank, const struct wire_response *response)
{
    struct simulated_rank *r = &world->ranks[rank];
    char *line = NULL;
    if (response->type == RESPONSE_JOIN_DONE) {
        line = text_format("join done");
        r->joined = false;
    } else {
        struct wire_request *mine = response_applies_to(response, rank)
                                        ? name_table_remove(&r->pending,
                                                            request_name_set(&response->request),
                                                            response->request.name)
                                        : NULL;
        if (response->type == RESPONSE_EXECUTE && mine == NULL && r->joined)
            line = text_format("run %s", response->request.name); /* with zeros */
        else if (response->type == RESPONSE_EXECUTE && mine == NULL)
            line = text_format("ran %s without having submitted it", response->request.name);
        else if (response->type == RESPONSE_EXECUTE)
            line = text_format("run %s", response->request.name);
        else
            line = text_format("error %s %s: %s", response->request.name,
                                 chorus_status_name(response->status),
                                 response->message ? response->message : "");
        if (mine != NULL) {
            wire_request_free(mine);
            free(mine);
        }
    }
    if (world->keep_logs)
        append_line(&r->log, &r->log_count, line);
    else
        free(line);
    if (world->protocol == SIMULATED_ROUNDS)
        ready_rounds_response_ran(&r->rounds, &r->cache, response);
}

/* Rank `rank` receives rank 0's RESPONSES message (exchange.c's resolve_cached_responses). */
static void receive_responses(struct simulated_ranks *world, int rank, const uint8_t *bytes,
                              size_t length)
{
    struct simulated_rank *r = &world->ranks[rank];
    struct wire_message message;
    char error[256];
    if (wire_decode(bytes, length, &message, error, sizeof error) != CHORUS_OK)
        abort();
    for (size_t i = 0; i < message.count; i++) {
        bool empty_slot = false;
        if (!response_cache_incoming(&r->cache, &message.responses[i], world->nranks, &empty_slot))
            abort();
        run(world, rank, &message.responses[i]);
    }
    wire_message_free(&message);
}

/* ----- the star path ------------------------------------------------------------------------ */

/* Every rank's new requests reach rank 0 (rank 0 feeds its own in directly). */
static void send_requests(struct simulated_ranks *world, double now)
{
    for (int rank = 0; rank < world->nranks; rank++) {
        struct simulated_rank *r = &world->ranks[rank];
        if (r->unsent_count == 0 && r->unsent_flags == 0)
            continue;
        struct wire_message message = {.kind = WIRE_REQUESTS,
                                       .flags = r->unsent_flags,
                                       .count = (uint32_t)r->unsent_count,
                                       .requests = r->unsent};
        uint8_t *bytes = NULL;
        size_t length = rank == 0 ? 0 : wire_encode(&message, &bytes);
        double start = clock_seconds();
        struct wire_message received = message;
        if (rank != 0) {
            char error[256];
            if (wire_decode(bytes, length, &received, error, sizeof error) != CHORUS_OK)
                abort();
            world->work.messages_in++;
        }
        for (size_t i = 0; i < received.count; i++) {
            const struct wire_request *request = &received.requests[i];
            if (request->cached)
                request = response_cache_get(&world->ranks[0].cache, request->cache_slot);
            if (request == NULL)
                abort();
            negotiator_submit(&world->negotiator, rank, request, now);
        }
        if (received.flags & WIRE_FLAG_JOIN)
            negotiator_join(&world->negotiator, rank);
        if (rank != 0)
            wire_message_free(&received);
        world->work.seconds += clock_seconds() - start;
        free(bytes);
        for (size_t i = 0; i < r->unsent_count; i++)
            wire_request_free(&r->unsent[i]);
        r->unsent_count = 0;
        r->unsent_flags = 0;
    }
}

/* Rank 0 encodes what its negotiator decided once (cached descriptions as slots) and sends it
 * to every other rank (exchange.c's send_responses). Returns the message, or NULL if none. */
static uint8_t *answer(struct simulated_ranks *world, struct wire_response **taken, size_t *count,
                       size_t *length)
{
    double start = clock_seconds();
    struct wire_response *responses = NULL;
    *count = negotiator_take_responses(&world->negotiator, &responses);
    *taken = responses;
    if (*count == 0) {
        world->work.seconds += clock_seconds() - start;
        return NULL;
    }
    struct wire_response *wire = malloc(*count * sizeof *wire);
    for (size_t i = 0; i < *count; i++)
        wire[i] = response_cache_outgoing(&world->ranks[0].cache, &responses[i], world->nranks);
    struct wire_message message = {
        .kind = WIRE_RESPONSES, .count = (uint32_t)*count, .responses = wire};
    uint8_t *bytes = NULL;
    *length = wire_encode(&message, &bytes);
    free(wire);
    world->work.messages_out += (size_t)world->nranks - 1;
    world->work.seconds += clock_seconds() - start;
    return bytes;
}

static void run_answer(struct simulated_ranks *world, struct wire_response *responses, size_t count,
                       const uint8_t *bytes, size_t length)
{
    for (size_t i = 0; i < count; i++)
        run(world, 0, &responses[i]);
    for (int rank = 1; rank < world->nranks && bytes != NULL; rank++)
        receive_responses(world, rank, bytes, length);
    for (size_t i = 0; i < count; i++)
        wire_response_free(&responses[i]);
    free(responses);
}

/* ----- rounds ------------------------------------------------------------------------------- */

/* The round's allreduce by recursive doubling, where at step k rank 0 combines the AND of ranks
 * [2^k, 2^(k+1)). The other ranks' share is computed first, untimed, so that rank 0's own work
 * runs in one piece, as it would in its own process, instead of between the other ranks'. */
static int others_share(struct simulated_ranks *world, size_t words)
{
    int steps = 0;
    for (int low = 1; low < world->nranks; low *= 2, steps++) {
        int high = 2 * low < world->nranks ? 2 * low : world->nranks;
        uint64_t *partial = &world->partial[(size_t)steps * words];
        memcpy(partial, world->ranks[low].vector, words * sizeof(uint64_t));
        for (int rank = low + 1; rank < high; rank++)
            ready_rounds_combine(partial, world->ranks[rank].vector, words);
    }
    return steps;
}

static void rank0_share(struct simulated_ranks *world, size_t words, int steps)
{
    double start = clock_seconds();
    memcpy(world->combined, world->ranks[0].vector, words * sizeof(uint64_t));
    for (int step = 0; step < steps; step++)
        ready_rounds_combine(world->combined, &world->partial[(size_t)step * words], words);
    world->work.seconds += clock_seconds() - start;
    world->work.messages_in += (size_t)steps;
    world->work.messages_out += (size_t)steps;
}

/* What rounds.c's settle_round does on rank `rank`. */
static void settle(struct simulated_ranks *world, int rank, struct wire_response *responses,
                   size_t count, const uint8_t *bytes, size_t length, bool follow)
{
    struct simulated_rank *r = &world->ranks[rank];
    double start = rank == 0 ? clock_seconds() : 0;
    struct round_outcome outcome;
    ready_rounds_settle(&r->rounds, world->combined, &outcome);
    if (outcome.responses_follow != follow)
        abort();
    if (rank == 0)
        world->work.seconds += clock_seconds() - start;
    if (follow && rank == 0)
        for (size_t i = 0; i < count; i++)
            run(world, 0, &responses[i]);
    else if (follow)
        receive_responses(world, rank, bytes, length);
    for (size_t i = 0; i < outcome.resend_count; i++) {
        const struct wire_request *entry = response_cache_get(&r->cache, outcome.resend[i]);
        const struct wire_request *mine = name_table_find(&r->pending, request_name_set(entry), entry->name);
        if (mine != NULL)
            queue_unsent(world, rank, mine);
    }
    start = rank == 0 ? clock_seconds() : 0;
    for (size_t i = 0; i < outcome.execute_count; i++) {
        struct wire_response response = {0};
        if (!response_cache_view(&r->cache, outcome.execute[i], world->nranks, &response))
            abort();
        if (rank == 0)
            world->work.seconds += clock_seconds() - start;
        run(world, rank, &response);
        start = rank == 0 ? clock_seconds() : 0;
    }
    if (rank == 0)
        world->work.seconds += clock_seconds() - start;
}

/* Rank 0 starts each cycle from caches as cold at every N: see simulated_evict_caches. */
static void evict_caches(struct simulated_ranks *world)
{
    for (size_t i = 0; i < world->eviction_bytes; i += 64)
        world->eviction[i]++;
}

static void round_cycle(struct simulated_ranks *world, double now)
{
    size_t words = ready_rounds_vector_words(&world->ranks[0].rounds);
    evict_caches(world);
    for (int rank = 1; rank < world->nranks; rank++)
        ready_rounds_contribute(&world->ranks[rank].rounds, world->ranks[rank].vector, 0, now,
                                world->demote_after);
    /* What the others computed arrives as messages, into caches (as a NIC delivers them). */
    int steps = others_share(world, words);
    struct wire_response *responses = NULL;
    size_t count = 0, length = 0;
    uint8_t *bytes = answer(world, &responses, &count, &length);
    bool follow = count > 0;
    double start = clock_seconds();
    ready_rounds_contribute(&world->ranks[0].rounds, world->ranks[0].vector,
                            follow ? ROUND_RESPONSES_FOLLOW : 0, now, world->demote_after);
    world->work.seconds += clock_seconds() - start;
    rank0_share(world, words, steps);
    for (int rank = 0; rank < world->nranks; rank++)
        settle(world, rank, responses, count, bytes, length, follow);
    for (size_t i = 0; i < count; i++)
        wire_response_free(&responses[i]);
    free(responses);
    free(bytes);
}

/* ----- cycles ------------------------------------------------------------------------------- */

static void collect_warning(void *context, const char *message)
{
    struct simulated_ranks *world = context;
    append_line(&world->warnings, &world->warning_count, strdup(message));
}

void simulated_cycle(struct simulated_ranks *world, double now, double warn_after,
                     double stall_fail)
{
    world->work.cycles++;
    if (world->protocol == SIMULATED_STAR)
        evict_caches(world);
    send_requests(world, now);
    if (warn_after > 0 || stall_fail > 0)
        negotiator_check_stalls(&world->negotiator, now, warn_after, stall_fail, collect_warning,
                                world);
    if (world->protocol == SIMULATED_ROUNDS) {
        round_cycle(world, now);
        return;
    }
    struct wire_response *responses = NULL;
    size_t count = 0, length = 0;
    uint8_t *bytes = answer(world, &responses, &count, &length);
    run_answer(world, responses, count, bytes, length);
    free(bytes);
}

size_t simulated_log(const struct simulated_ranks *world, int rank, const char *const **lines)
{
    *lines = (const char *const *)world->ranks[rank].log;
    return world->ranks[rank].log_count;
}

size_t simulated_warnings(const struct simulated_ranks *world, const char *const **lines)
{
    *lines = (const char *const *)world->warnings;
    return world->warning_count;
}

size_t simulated_pending(const struct simulated_ranks *world, int rank)
{
    return world->ranks[rank].pending.size;
}

const struct rank0_work *simulated_rank0_work(const struct simulated_ranks *world)
{
    return &world->work;
}

void simulated_evict_caches(struct simulated_ranks *world, size_t bytes)
{
    free(world->eviction);
    world->eviction = bytes > 0 ? calloc(bytes, 1) : NULL;
    world->eviction_bytes = world->eviction != NULL ? bytes : 0;
}

void simulated_keep_logs(struct simulated_ranks *world, bool keep)
{
    world->keep_logs = keep;
}

void simulated_reset_work(struct simulated_ranks *world)
{
    memset(&world->work, 0, sizeof world->work);
}
