/*
 * ucx_world.c — chorus_world_open, chorus_init_world and the rest (chorus.h): a world over UCX.
 * Each rank's side of it is UCX's context and two fabrics, control (the negotiation channel and
 * abort notices) and data (collectives). A rank's address is both fabrics' addresses, each after
 * its length (4 bytes, this machine's order: the ranks of a job run one build).
 */
#include "../coordinator/world_links.h"
#include "../transport/transport_ucx.h"
#include "instance.h"

#include <stdlib.h>
#include <string.h>

enum { CONTROL, DATA, FABRICS };

struct chorus_world {
    struct ucx_context *context;
    struct ucx_fabric *fabrics[FABRICS];
    uint8_t *address;
    size_t address_bytes;
    struct world_links links; /* the instance's, until chorus_shutdown */
};

chorus_status chorus_world_open(int number, chorus_world **world)
{
    if (world == NULL || number < 0 || number > UINT16_MAX)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "chorus_world_open: world number %d is not within 0 .. %d", number,
                      UINT16_MAX);
    uint16_t epoch = (uint16_t)number;
    char error[512] = "";
    *world = calloc(1, sizeof **world);
    if (*world == NULL)
        return REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus over UCX: out of memory");
    chorus_status status = ucx_context_create(&(*world)->context, error, sizeof error);
    for (int f = 0; f < FABRICS && status == CHORUS_OK; f++)
        status = ucx_fabric_create((*world)->context, epoch, &(*world)->fabrics[f], error,
                                   sizeof error);
    size_t total = 0, lengths[FABRICS] = {0};
    const void *parts[FABRICS] = {NULL};
    for (int f = 0; f < FABRICS && status == CHORUS_OK; f++) {
        parts[f] = ucx_fabric_address((*world)->fabrics[f], &lengths[f]);
        total += sizeof(uint32_t) + lengths[f];
    }
    if (status == CHORUS_OK && ((*world)->address = malloc(total)) == NULL)
        status = CHORUS_ERR_OUT_OF_MEMORY;
    if (status != CHORUS_OK) {
        chorus_world_close(*world);
        *world = NULL;
        return REJECT(status, "chorus over UCX: %s", error[0] ? error : "out of memory");
    }
    uint8_t *at = (*world)->address;
    for (int f = 0; f < FABRICS; f++) {
        uint32_t length = (uint32_t)lengths[f];
        memcpy(at, &length, sizeof length);
        memcpy(at + sizeof length, parts[f], lengths[f]);
        at += sizeof length + lengths[f];
    }
    (*world)->address_bytes = total;
    return CHORUS_OK;
}

void chorus_world_address(const chorus_world *world, const void **address, size_t *bytes)
{
    *bytes = world->address_bytes;
    *address = world->address;
}

/* Rank `rank`'s address of fabric `which` inside its whole address (no bounds are known: the
 * driver hands over what the ranks gave it). */
static const void *fabric_address(const void *whole, int which)
{
    const uint8_t *at = whole;
    for (int f = 0; f < which; f++) {
        uint32_t length;
        memcpy(&length, at, sizeof length);
        at += sizeof length + length;
    }
    return at + sizeof(uint32_t);
}

chorus_status chorus_init_world(chorus_world *world, int rank, int size, const char *host,
                                const void *const *addresses, const chorus_init_options *options)
{
    if (world == NULL || size < 1 || rank < 0 || rank >= size || addresses == NULL)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "chorus over UCX: rank %d of %d ranks cannot start", rank, size);
    const void **parts = calloc((size_t)size, sizeof *parts);
    if (parts == NULL)
        return REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus over UCX: out of memory");
    char error[512] = "";
    chorus_status status = CHORUS_OK;
    for (int f = 0; f < FABRICS && status == CHORUS_OK; f++) {
        for (int r = 0; r < size; r++)
            parts[r] = fabric_address(addresses[r], f);
        status = ucx_fabric_connect(world->fabrics[f], rank, size, parts, error, sizeof error);
    }
    free(parts);
    if (status != CHORUS_OK)
        return REJECT(status, "chorus over UCX: %s", error);
    struct world_links *links = &world->links;
    *links = (struct world_links){.rank = rank,
                                  .size = size,
                                  .host = host,
                                  .poll_abort = abort_ucx_poll,
                                  .notify_abort = abort_ucx_notify,
                                  .abort_context = world->fabrics[CONTROL]};
    if (!channel_ucx_init(&links->channel, world->fabrics[CONTROL]))
        return REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus over UCX: out of memory");
    transport_ucx_init(&links->transport, world->fabrics[DATA]);
    status = api_init_on_links(links, options);
    /* A start that never reached the background thread leaves the channel here. */
    if (status != CHORUS_OK && links->channel.release != NULL)
        links->channel.release(links->channel.state, true);
    return status;
}

void chorus_world_close(chorus_world *world)
{
    if (world == NULL)
        return;
    for (int f = 0; f < FABRICS; f++)
        ucx_fabric_destroy(world->fabrics[f]);
    ucx_context_destroy(world->context);
    free(world->address);
    free(world);
}
