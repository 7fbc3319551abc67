/*
 * world_segments.c — the host's segment and small-message slots in a world without MPI
 * (lib/coordinator/world_links.h), where no MPI_Comm_split_type finds the ranks of a host: the
 * topology's host names do (ranks of one name share a host, local ranks in rank order, hosts in
 * the order of their first rank, as over MPI), and the few words the segments' makers exchange
 * travel over the world's transport (start-up's allgather and fold, every rank of the world
 * taking part).
 */
#include "backend.h"

#include "../collectives/startup_collectives.h"
#include "../core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct executor_world_group {
    struct host_exchange exchange;
    struct transport *world;
    int *host_members;  /* world rank of each local rank */
    int *cross_members; /* world rank of this local rank on each host */
    int hosts;
};

static bool world_allgather(void *context, const void *mine, size_t bytes, void *all)
{
    struct executor_world_group *group = context;
    struct transport *world = group->world;
    unsigned char *everyone = malloc((size_t)world->nranks * bytes);
    bool gathered = everyone != NULL &&
                    startup_allgather(world, mine, bytes, everyone) == CHORUS_OK;
    for (int r = 0; gathered && r < group->exchange.local_size; r++)
        memcpy((unsigned char *)all + (size_t)r * bytes,
               everyone + (size_t)group->host_members[r] * bytes, bytes);
    free(everyone);
    return gathered;
}

static bool world_minimum(void *context, uint64_t *words, size_t count)
{
    struct executor_world_group *group = context;
    return startup_fold(group->world, words, count, STARTUP_MIN) == CHORUS_OK;
}

/* This rank's host's members and this local rank's member on each host, from the names. */
static bool find_members(struct executor_world_group *group, int rank, int size,
                         const char (*host_names)[CHORUS_HOST_NAME_SIZE])
{
    group->host_members = calloc((size_t)size, sizeof *group->host_members);
    group->cross_members = calloc((size_t)size, sizeof *group->cross_members);
    if (group->host_members == NULL || group->cross_members == NULL)
        return false;
    int local = 0;
    for (int r = 0; r < size; r++) {
        if (strcmp(host_names[r], host_names[rank]) != 0)
            continue;
        if (r == rank)
            group->exchange.local_rank = local;
        group->host_members[local++] = r;
    }
    group->exchange.local_size = local;
    /* A host's first rank is the one no earlier rank shares a name with; its local rank
     * `mine` is its (mine + 1)-th rank. */
    int mine = group->exchange.local_rank;
    for (int first = 0; first < size; first++) {
        bool seen = false;
        for (int r = 0; r < first && !seen; r++)
            seen = strcmp(host_names[r], host_names[first]) == 0;
        if (seen)
            continue;
        int count = -1;
        for (int r = first; r < size; r++) {
            if (strcmp(host_names[r], host_names[first]) == 0 && ++count == mine) {
                group->cross_members[group->hosts++] = r;
                break;
            }
        }
    }
    return true;
}

static void free_group(struct executor_world_group *group)
{
    if (group == NULL)
        return;
    free(group->host_members);
    free(group->cross_members);
    free(group);
}

chorus_status executor_prepare_on_links(struct executor *executor, char *error,
                                        size_t error_size)
{
    if (executor->local_ranks <= 1)
        return CHORUS_OK;
    struct executor_world_group *group = calloc(1, sizeof *group);
    if (group == NULL ||
        !find_members(group, executor->rank, executor->nranks, executor->host_names)) {
        free_group(group);
        /* The others still make the segment: a rank without memory for this cannot go on. */
        snprintf(error, error_size, "out of memory for the host's ranks");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    group->world = &executor->transport;
    group->exchange.allgather = world_allgather;
    group->exchange.minimum = world_minimum;
    group->exchange.context = group;
    executor->world_group = group;
    const struct executor_settings *settings = executor->settings;
    const struct chorus_params *params = settings->params;
    chorus_status status = node_segment_create_links(
        &executor->node, &group->exchange, &executor->transport, group->cross_members,
        group->hosts, group->hosts > 1 ? params->cross_host_chunk : params->segment_chunk,
        (unsigned)params->staging_areas, settings->staging_streaming, settings->oversubscribed,
        error, error_size);
    executor_adopt_node(executor, status == CHORUS_OK);
    if (status == CHORUS_OK && group->hosts == 1) {
        char why[256] = "";
        executor->small_ready =
            small_segment_create_links(&executor->small, &group->exchange, params->small_limit,
                                       settings->oversubscribed, why, sizeof why) == CHORUS_OK;
        if (!executor->small_ready)
            LOG(LOG_WARNING, "node", "%s; small collectives go through the host's segment", why);
    }
    return status;
}

const struct host_exchange *executor_host_exchange(const struct executor *executor)
{
    return executor->world_group != NULL ? &executor->world_group->exchange : NULL;
}

int executor_world_member(const struct executor *executor, int local)
{
    const struct executor_world_group *group = executor->world_group;
    return group != NULL && local >= 0 && local < group->exchange.local_size
               ? group->host_members[local]
               : -1;
}

void executor_release_world_group(struct executor *executor)
{
    free_group(executor->world_group);
    executor->world_group = NULL;
}
