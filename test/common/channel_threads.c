/*
 * channel_threads.c — see channel_threads.h.
 */
#include "channel_threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { ROUND_SLOTS = 4 };

struct message {
    int source;
    int tag;
    uint8_t *bytes;
    size_t length;
    struct message *next;
};

/* One round in flight: ranks may be at most a few rounds apart (a rank posts round n + 1
 * only after round n completed, which needed every rank to post it). */
struct round_slot {
    uint64_t number;
    int arrived;
    int taken;
    uint64_t *combined;
    size_t words;
};

struct channel_world {
    int nranks;
    pthread_mutex_t lock;
    struct message **inbox; /* per rank, oldest first */
    bool *corrupt_next;
    struct round_slot rounds[ROUND_SLOTS];
    bool *notice_waiting; /* per rank: another rank's abort notice */
    struct abort_notice *notices;
    struct channel_end *ends;
};

struct channel_end {
    struct channel_world *world;
    int rank;
    uint64_t round_number; /* of this rank's next round */
    uint64_t *round_result;
    bool round_posted;
};

struct channel_world *channel_world_create(int nranks)
{
    struct channel_world *world = calloc(1, sizeof *world);
    world->nranks = nranks;
    pthread_mutex_init(&world->lock, NULL);
    world->inbox = calloc((size_t)nranks, sizeof *world->inbox);
    world->corrupt_next = calloc((size_t)nranks, sizeof *world->corrupt_next);
    world->notice_waiting = calloc((size_t)nranks, sizeof *world->notice_waiting);
    world->notices = calloc((size_t)nranks, sizeof *world->notices);
    world->ends = calloc((size_t)nranks, sizeof *world->ends);
    for (int slot = 0; slot < ROUND_SLOTS; slot++)
        world->rounds[slot].number = (uint64_t)slot;
    return world;
}

void channel_world_destroy(struct channel_world *world)
{
    for (int r = 0; r < world->nranks; r++) {
        while (world->inbox[r] != NULL) {
            struct message *message = world->inbox[r];
            world->inbox[r] = message->next;
            free(message->bytes);
            free(message);
        }
    }
    for (int slot = 0; slot < ROUND_SLOTS; slot++)
        free(world->rounds[slot].combined);
    pthread_mutex_destroy(&world->lock);
    free(world->inbox);
    free(world->corrupt_next);
    free(world->notice_waiting);
    free(world->notices);
    free(world->ends);
    free(world);
}

void channel_world_corrupt_next(struct channel_world *world, int rank)
{
    pthread_mutex_lock(&world->lock);
    world->corrupt_next[rank] = true;
    pthread_mutex_unlock(&world->lock);
}

static chorus_status post(void *state, uint8_t *bytes, size_t length, const int *destinations,
                          int destination_count, int tag)
{
    struct channel_end *end = state;
    struct channel_world *world = end->world;
    pthread_mutex_lock(&world->lock);
    for (int i = 0; i < destination_count; i++) {
        struct message *message = calloc(1, sizeof *message);
        message->source = end->rank;
        message->tag = tag;
        message->length = length;
        message->bytes = malloc(length ? length : 1);
        if (length != 0)
            memcpy(message->bytes, bytes, length);
        struct message **link = &world->inbox[destinations[i]];
        while (*link != NULL)
            link = &(*link)->next;
        *link = message;
    }
    pthread_mutex_unlock(&world->lock);
    free(bytes);
    return CHORUS_OK;
}

static void progress(void *state, bool wait, bool failed)
{
    (void)state, (void)wait, (void)failed; /* sends complete as they are posted */
}

static chorus_status receive(void *state, int source, int tag, uint8_t **bytes, size_t *length,
                             int *sender)
{
    struct channel_end *end = state;
    struct channel_world *world = end->world;
    *bytes = NULL;
    pthread_mutex_lock(&world->lock);
    struct message **link = &world->inbox[end->rank];
    while (*link != NULL && ((*link)->tag != tag || (source >= 0 && (*link)->source != source)))
        link = &(*link)->next;
    struct message *message = *link;
    if (message != NULL) {
        *link = message->next;
        if (world->corrupt_next[end->rank]) {
            world->corrupt_next[end->rank] = false;
            memset(message->bytes, 0xa5, message->length);
        }
    }
    pthread_mutex_unlock(&world->lock);
    if (message == NULL)
        return CHORUS_OK;
    *bytes = message->bytes;
    *length = message->length;
    *sender = message->source;
    free(message);
    return CHORUS_OK;
}

static chorus_status round_post(void *state, const uint64_t *mine, uint64_t *result, size_t words)
{
    struct channel_end *end = state;
    struct channel_world *world = end->world;
    pthread_mutex_lock(&world->lock);
    struct round_slot *slot = &world->rounds[end->round_number % ROUND_SLOTS];
    if (slot->combined == NULL) {
        slot->combined = malloc(words * sizeof *slot->combined);
        memset(slot->combined, 0xff, words * sizeof *slot->combined);
        slot->words = words;
    }
    for (size_t w = 0; w < words; w++)
        slot->combined[w] &= mine[w];
    slot->arrived++;
    pthread_mutex_unlock(&world->lock);
    end->round_result = result;
    end->round_posted = true;
    return CHORUS_OK;
}

static chorus_status round_test(void *state, bool *done)
{
    struct channel_end *end = state;
    struct channel_world *world = end->world;
    pthread_mutex_lock(&world->lock);
    struct round_slot *slot = &world->rounds[end->round_number % ROUND_SLOTS];
    *done = end->round_posted && slot->arrived == world->nranks;
    if (*done) {
        memcpy(end->round_result, slot->combined, slot->words * sizeof *slot->combined);
        end->round_posted = false;
        end->round_number++;
        if (++slot->taken == world->nranks) {
            free(slot->combined);
            *slot = (struct round_slot){.number = slot->number + ROUND_SLOTS};
        }
    }
    pthread_mutex_unlock(&world->lock);
    return CHORUS_OK;
}

static void release(void *state, bool failed)
{
    (void)state, (void)failed; /* the world owns the ends */
}

void channel_threads_init(struct channel *channel, struct channel_world *world, int rank)
{
    struct channel_end *end = &world->ends[rank];
    *end = (struct channel_end){.world = world, .rank = rank};
    *channel = (struct channel){.state = end,
                                      .post = post,
                                      .progress = progress,
                                      .receive = receive,
                                      .round_post = round_post,
                                      .round_test = round_test,
                                      .release = release};
}

bool channel_threads_poll_abort(void *state, struct abort_notice *notice)
{
    struct channel_end *end = state;
    struct channel_world *world = end->world;
    pthread_mutex_lock(&world->lock);
    bool waiting = world->notice_waiting[end->rank];
    if (waiting)
        *notice = world->notices[end->rank];
    pthread_mutex_unlock(&world->lock);
    return waiting;
}

void channel_threads_notify_abort(void *state, const struct abort_notice *notice)
{
    struct channel_end *end = state;
    struct channel_world *world = end->world;
    pthread_mutex_lock(&world->lock);
    for (int r = 0; r < world->nranks; r++) {
        if (r == end->rank || world->notice_waiting[r])
            continue; /* the first notice stays */
        world->notices[r] = *notice;
        world->notice_waiting[r] = true;
    }
    pthread_mutex_unlock(&world->lock);
}
