/*
 * rank_links_threads.c — rank_links.h over the thread channel and transport.
 */
#include "rank_links.h"

#include "channel_threads.h"

#include <stdlib.h>

struct rank_links {
    int nranks;
    struct channel_world *world;
    struct thread_fabric *fabric;
};

struct rank_links *rank_links_create(int nranks)
{
    struct rank_links *links = calloc(1, sizeof *links);
    links->nranks = nranks;
    links->world = channel_world_create(nranks);
    links->fabric = thread_fabric_create(nranks);
    return links;
}

void rank_links_destroy(struct rank_links *links)
{
    channel_world_destroy(links->world);
    thread_fabric_destroy(links->fabric);
    free(links);
}

void rank_links_init(struct rank_links *links, int rank, struct world_links *world)
{
    *world = (struct world_links){.rank = rank,
                                  .size = links->nranks,
                                  .poll_abort = channel_threads_poll_abort,
                                  .notify_abort = channel_threads_notify_abort};
    channel_threads_init(&world->channel, links->world, rank);
    transport_threads_init(&world->transport, links->fabric, rank);
    world->abort_context = world->channel.state;
}

void rank_links_corrupt_next(struct rank_links *links, int rank)
{
    channel_world_corrupt_next(links->world, rank);
}

const char *rank_links_kind(void)
{
    return "threads";
}
