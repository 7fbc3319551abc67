/*
 * rank_links_ucx.c — rank_links.h over UCX: per rank one fabric for the channel (channel_ucx.c)
 * and the abort notices (abort_ucx.c), and one for the transport, as MPI has a control and a
 * data communicator, connected through addresses handed over in memory. A corrupted message is
 * made by a channel around the UCX one that spoils what it receives.
 */
#include "rank_links.h"

#include "../../lib/transport/transport_ucx.h"

#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { CHANNEL_FABRIC, TRANSPORT_FABRIC, FABRICS };

/* A rank's channel: the UCX one, and whether its next received message is spoiled. */
struct spoiling_channel {
    struct channel inner;
    atomic_bool corrupt_next;
};

struct rank_links {
    int nranks;
    struct ucx_fabric *(*fabrics)[FABRICS];
    struct spoiling_channel *channels;
};

static struct ucx_context *shared_context(void)
{
    static struct ucx_context *context;
    char error[256];
    if (context == NULL && ucx_context_create(&context, error, sizeof error) != CHORUS_OK)
        ck_abort_msg("rank_links: %s", error);
    return context;
}

struct rank_links *rank_links_create(int nranks)
{
    static uint16_t epoch;
    struct rank_links *links = calloc(1, sizeof *links);
    links->nranks = nranks;
    links->fabrics = calloc((size_t)nranks, sizeof *links->fabrics);
    links->channels = calloc((size_t)nranks, sizeof *links->channels);
    const void **addresses = calloc((size_t)nranks, sizeof *addresses);
    char error[256] = "";
    for (int f = 0; f < FABRICS; f++) {
        epoch++;
        for (int r = 0; r < nranks; r++) {
            ck_assert_msg(ucx_fabric_create(shared_context(), epoch, &links->fabrics[r][f], error,
                                            sizeof error) == CHORUS_OK,
                          "rank_links: %s", error);
            size_t bytes;
            addresses[r] = ucx_fabric_address(links->fabrics[r][f], &bytes);
        }
        for (int r = 0; r < nranks; r++)
            ck_assert_msg(ucx_fabric_connect(links->fabrics[r][f], r, nranks, addresses, error,
                                             sizeof error) == CHORUS_OK,
                          "rank_links: %s", error);
    }
    free(addresses);
    return links;
}

void rank_links_destroy(struct rank_links *links)
{
    for (int r = 0; r < links->nranks; r++)
        for (int f = 0; f < FABRICS; f++)
            ucx_fabric_destroy(links->fabrics[r][f]);
    free(links->fabrics);
    free(links->channels);
    free(links);
}

static chorus_status spoiling_post(void *state, uint8_t *bytes, size_t length,
                                   const int *destinations, int destination_count, int tag)
{
    struct spoiling_channel *channel = state;
    return channel->inner.post(channel->inner.state, bytes, length, destinations, destination_count,
                               tag);
}

static void spoiling_progress(void *state, bool wait, bool failed)
{
    struct spoiling_channel *channel = state;
    channel->inner.progress(channel->inner.state, wait, failed);
}

static chorus_status spoiling_receive(void *state, int source, int tag, uint8_t **bytes,
                                      size_t *length, int *sender)
{
    struct spoiling_channel *channel = state;
    chorus_status status =
        channel->inner.receive(channel->inner.state, source, tag, bytes, length, sender);
    if (status == CHORUS_OK && *bytes != NULL && atomic_exchange(&channel->corrupt_next, false)) {
        free(*bytes);
        *bytes = malloc(3);
        memset(*bytes, 0xff, 3);
        *length = 3;
    }
    return status;
}

static chorus_status spoiling_round_post(void *state, const uint64_t *mine, uint64_t *result,
                                         size_t words)
{
    struct spoiling_channel *channel = state;
    return channel->inner.round_post(channel->inner.state, mine, result, words);
}

static chorus_status spoiling_round_test(void *state, bool *done)
{
    struct spoiling_channel *channel = state;
    return channel->inner.round_test(channel->inner.state, done);
}

static void spoiling_release(void *state, bool failed)
{
    struct spoiling_channel *channel = state;
    channel->inner.release(channel->inner.state, failed);
}

static const char *spoiling_failure(void *state)
{
    struct spoiling_channel *channel = state;
    return channel_failure(&channel->inner, NULL);
}

void rank_links_init(struct rank_links *links, int rank, struct world_links *world)
{
    struct spoiling_channel *spoiling = &links->channels[rank];
    ck_assert(channel_ucx_init(&spoiling->inner, links->fabrics[rank][CHANNEL_FABRIC]));
    *world = (struct world_links){.rank = rank,
                                  .size = links->nranks,
                                  .poll_abort = abort_ucx_poll,
                                  .notify_abort = abort_ucx_notify,
                                  .abort_context = links->fabrics[rank][CHANNEL_FABRIC]};
    world->channel = (struct channel){.state = spoiling,
                                .post = spoiling_post,
                                .progress = spoiling_progress,
                                .receive = spoiling_receive,
                                .round_post = spoiling_round_post,
                                .round_test = spoiling_round_test,
                                .release = spoiling_release,
                                .failure = spoiling_failure};
    transport_ucx_init(&world->transport, links->fabrics[rank][TRANSPORT_FABRIC]);
}

void rank_links_corrupt_next(struct rank_links *links, int rank)
{
    atomic_store(&links->channels[rank].corrupt_next, true);
}

const char *rank_links_kind(void)
{
    return "ucx";
}
