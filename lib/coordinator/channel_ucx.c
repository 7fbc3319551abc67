/*
 * channel_ucx.c — the negotiation channel (channel.h) over a UCX fabric (transport_ucx.h), for
 * worlds that outlive a lost rank: each message one tagged send per destination, kept until it
 * completes; receives by probing, so that a message of any length is taken whole; a round by
 * sending this rank's words to every other rank and AND-ing theirs as they come (n - 1 messages
 * a rank: elastic worlds are tens of ranks, and a round is what every rank waits for anyway).
 * Built into the UCX library, not libchorus (meson.build says why).
 */
#include "../negotiation/channel.h"

#include "../core/log.h"
#include "../transport/transport_ucx.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* A round's words travel with this tag, beside the channel's own (channel.h). */
#define ROUND_TAG 64

/* After a fatal error, how long the last sends may take before they are given up (a peer that
 * stopped never receives them), as channel_mpi.c. */
#define FAILED_DRAIN_SECONDS 1.0
/* At release, otherwise: long enough for a live peer on a loaded machine. */
#define RELEASE_DRAIN_SECONDS 10.0

struct outgoing {
    uint8_t *bytes;
    int count;
    struct outgoing *next;
    void *pending[]; /* per destination; NULL once done */
};

struct channel_ucx {
    struct ucx_fabric *fabric;
    int rank, nranks;
    struct outgoing *outgoing;
    /* The round in flight: the AND so far, and which ranks' words are in it. */
    uint64_t *round_result;
    size_t round_words;
    bool *round_heard;
    int round_missing;
    char error[256];
};

static void report_failure(struct channel_ucx *channel, chorus_status status)
{
    if (status != CHORUS_OK)
        LOG(LOG_DEBUG, "negotiation", "rank %d: %s", channel->rank, channel->error);
}

/* Sends `bytes` to each of `destinations`; the buffer is freed once every send finished. */
static chorus_status send_all(struct channel_ucx *channel, uint8_t *bytes, size_t length,
                              const int *destinations, int destination_count, int tag)
{
    channel->error[0] = '\0';
    struct outgoing *outgoing =
        calloc(1, sizeof *outgoing + (size_t)destination_count * sizeof(void *));
    if (outgoing == NULL) {
        free(bytes);
        snprintf(channel->error, sizeof channel->error, "out of memory sending a message");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    *outgoing = (struct outgoing){.bytes = bytes, .next = channel->outgoing};
    channel->outgoing = outgoing;
    for (int i = 0; i < destination_count; i++) {
        chorus_status status =
            ucx_message_send(channel->fabric, destinations[i], tag, bytes, length,
                             &outgoing->pending[i], channel->error, sizeof channel->error);
        outgoing->count = i + 1;
        if (status != CHORUS_OK) {
            report_failure(channel, status);
            return status;
        }
    }
    return CHORUS_OK;
}

static chorus_status post(void *state, uint8_t *bytes, size_t length, const int *destinations,
                          int destination_count, int tag)
{
    return send_all(state, bytes, length, destinations, destination_count, tag);
}

/* Frees the outgoing messages whose sends all finished; true when none is left. */
static bool reap_outgoing(struct channel_ucx *channel)
{
    struct outgoing **link = &channel->outgoing;
    while (*link != NULL) {
        struct outgoing *outgoing = *link;
        bool done = true;
        for (int i = 0; i < outgoing->count; i++) {
            if (outgoing->pending[i] != NULL &&
                ucx_message_sent(channel->fabric, outgoing->pending[i]))
                outgoing->pending[i] = NULL;
            done = done && outgoing->pending[i] == NULL;
        }
        if (!done) {
            link = &outgoing->next;
            continue;
        }
        *link = outgoing->next;
        free(outgoing->bytes);
        free(outgoing);
    }
    return channel->outgoing == NULL;
}

/* Gives up the sends still outgoing. UCX may read their bytes until the fabric is destroyed,
 * so the fabric keeps them until then. */
static void abandon_outgoing(struct channel_ucx *channel)
{
    while (channel->outgoing != NULL) {
        struct outgoing *outgoing = channel->outgoing;
        channel->outgoing = outgoing->next;
        for (int i = 0; i < outgoing->count; i++)
            ucx_message_abandon(channel->fabric, outgoing->pending[i]);
        ucx_message_keep(channel->fabric, outgoing->bytes);
        free(outgoing);
    }
}

/* Completes what is outgoing, for at most `seconds` (negative: for as long as it takes), then
 * gives up the rest. */
static void drain(struct channel_ucx *channel, double seconds)
{
    double give_up = clock_seconds() + seconds;
    while (!reap_outgoing(channel)) {
        if (seconds >= 0 && clock_seconds() > give_up) {
            abandon_outgoing(channel);
            return;
        }
        sched_yield();
    }
}

static void progress(void *state, bool wait, bool failed)
{
    struct channel_ucx *channel = state;
    if (wait)
        drain(channel, failed ? FAILED_DRAIN_SECONDS : -1);
    else
        reap_outgoing(channel);
}

static chorus_status receive(void *state, int source, int tag, uint8_t **bytes, size_t *length,
                             int *sender)
{
    struct channel_ucx *channel = state;
    channel->error[0] = '\0';
    chorus_status status = ucx_message_take(channel->fabric, source, tag, bytes, length, sender,
                                            channel->error, sizeof channel->error);
    report_failure(channel, status);
    return status;
}

static chorus_status round_post(void *state, const uint64_t *mine, uint64_t *result, size_t words)
{
    struct channel_ucx *channel = state;
    size_t bytes = words * sizeof *mine;
    uint8_t *copy = malloc(bytes > 0 ? bytes : 1);
    int *others = channel_ranks_but(channel->rank, channel->nranks);
    if (copy == NULL || others == NULL) {
        free(copy);
        free(others);
        snprintf(channel->error, sizeof channel->error, "out of memory posting a round");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    memcpy(copy, mine, bytes);
    memmove(result, mine, bytes);
    channel->round_result = result;
    channel->round_words = words;
    channel->round_missing = channel->nranks - 1;
    memset(channel->round_heard, 0, (size_t)channel->nranks * sizeof *channel->round_heard);
    channel->round_heard[channel->rank] = true;
    chorus_status status = send_all(channel, copy, bytes, others, channel->nranks - 1, ROUND_TAG);
    free(others);
    return status;
}

/* Takes the round's words from the ranks not yet heard. A rank posts its next round only after
 * this one completed, and a rank's messages of one tag arrive in order, so the first message
 * from each rank is its part of this round. */
static chorus_status round_test(void *state, bool *done)
{
    struct channel_ucx *channel = state;
    channel->error[0] = '\0';
    for (int r = 0; r < channel->nranks && channel->round_missing > 0; r++) {
        if (channel->round_heard[r])
            continue;
        uint8_t *bytes = NULL;
        size_t length = 0;
        int sender = r;
        chorus_status status = ucx_message_take(channel->fabric, r, ROUND_TAG, &bytes, &length,
                                                &sender, channel->error, sizeof channel->error);
        if (status != CHORUS_OK) {
            report_failure(channel, status);
            return status;
        }
        if (bytes == NULL)
            continue;
        if (length != channel->round_words * sizeof(uint64_t)) {
            free(bytes);
            snprintf(channel->error, sizeof channel->error,
                     "rank %d's round has %zu bytes, not %zu", r, length,
                     channel->round_words * sizeof(uint64_t));
            report_failure(channel, CHORUS_ERR_PROTOCOL);
            return CHORUS_ERR_PROTOCOL;
        }
        for (size_t w = 0; w < channel->round_words; w++) {
            uint64_t word;
            memcpy(&word, bytes + w * sizeof word, sizeof word);
            channel->round_result[w] &= word;
        }
        free(bytes);
        channel->round_heard[r] = true;
        channel->round_missing--;
    }
    reap_outgoing(channel);
    *done = channel->round_missing == 0;
    return CHORUS_OK;
}

static void release(void *state, bool failed)
{
    struct channel_ucx *channel = state;
    /* Bounded also without a failure: a start that failed releases the channel with sends its
     * peers may never take. */
    if (failed)
        abandon_outgoing(channel);
    else
        drain(channel, RELEASE_DRAIN_SECONDS);
    free(channel->round_heard);
    free(channel);
}

static const char *failure(void *state)
{
    struct channel_ucx *channel = state;
    return channel->error;
}

bool channel_ucx_init(struct channel *channel, struct ucx_fabric *fabric)
{
    struct channel_ucx *state = calloc(1, sizeof *state);
    if (state == NULL)
        return false;
    int nranks = 1;
    int rank = ucx_fabric_rank(fabric, &nranks);
    *state = (struct channel_ucx){.fabric = fabric,
                                  .rank = rank,
                                  .nranks = nranks,
                                  .round_heard = calloc((size_t)nranks, sizeof(bool))};
    if (state->round_heard == NULL) {
        free(state);
        return false;
    }
    *channel = (struct channel){.state = state,
                                .post = post,
                                .progress = progress,
                                .receive = receive,
                                .round_post = round_post,
                                .round_test = round_test,
                                .release = release,
                                .failure = failure};
    return true;
}
