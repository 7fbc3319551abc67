/*
 * topology.c — where this rank runs: ranks on the same host (MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED), the host's index among hosts, and, with hwloc, the cores, hardware
 * threads and NUMA nodes this rank's CPU binding allows, whether the ranks of this host all
 * run under one last-level cache, and whether they outnumber the processing units their
 * bindings allow together. Over MPI (topology_discover) or from every rank's record, where a
 * world has no MPI (topology_from_records).
 */
#include "topology.h"

#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int topology_cache_domain(hwloc_topology_t hw, hwloc_const_cpuset_t cpus)
{
    /* The last-level caches are the caches of the smallest depth (nearest the machine). */
    int depth = -1;
    for (int d = 0; d < hwloc_topology_get_depth(hw) && depth < 0; d++) {
        hwloc_obj_t first = hwloc_get_obj_by_depth(hw, d, 0);
        if (first != NULL && hwloc_obj_type_is_cache(first->type) &&
            !hwloc_obj_type_is_icache(first->type))
            depth = d;
    }
    if (depth < 0 || hwloc_bitmap_iszero(cpus))
        return -1;
    int domain = -1;
    for (unsigned i = 0; i < (unsigned)hwloc_get_nbobjs_by_depth(hw, depth); i++) {
        hwloc_obj_t cache = hwloc_get_obj_by_depth(hw, depth, i);
        if (!hwloc_bitmap_intersects(cache->cpuset, cpus))
            continue;
        if (domain >= 0 || !hwloc_bitmap_isincluded(cpus, cache->cpuset))
            return -1; /* the CPUs span several caches */
        domain = (int)cache->logical_index;
    }
    return domain;
}

/* Counts what the binding allows, writes it as `binding` (TOPOLOGY_BINDING_WORDS words; all
 * zero when unknown), and returns its cache domain (topology_cache_domain). */
static int count_cpus(chorus_topology *topology, unsigned long *binding)
{
    int domain = -1;
    hwloc_topology_t hw;
    topology->cores = topology->pus = topology->numa_nodes = 0;
    if (hwloc_topology_init(&hw) != 0)
        return -1;
    if (hwloc_topology_load(hw) != 0) {
        hwloc_topology_destroy(hw);
        return -1;
    }
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    if (allowed != NULL && hwloc_get_cpubind(hw, allowed, HWLOC_CPUBIND_PROCESS) != 0)
        hwloc_bitmap_copy(allowed, hwloc_topology_get_allowed_cpuset(hw));
    if (allowed != NULL) {
        topology->pus = (size_t)hwloc_get_nbobjs_inside_cpuset_by_type(hw, allowed, HWLOC_OBJ_PU);
        topology->cores =
            (size_t)hwloc_get_nbobjs_inside_cpuset_by_type(hw, allowed, HWLOC_OBJ_CORE);
        int numa = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
        for (int i = 0; i < numa; i++) {
            hwloc_obj_t node = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
            if (node != NULL && hwloc_bitmap_intersects(node->cpuset, allowed))
                topology->numa_nodes++;
        }
        domain = topology_cache_domain(hw, allowed);
        if (hwloc_bitmap_last(allowed) >= TOPOLOGY_BINDING_WORDS * (int)(8 * sizeof *binding) ||
            hwloc_bitmap_to_ulongs(allowed, TOPOLOGY_BINDING_WORDS, binding) != 0)
            memset(binding, 0, TOPOLOGY_BINDING_WORDS * sizeof *binding);
        hwloc_bitmap_free(allowed);
    }
    if (topology->numa_nodes == 0)
        topology->numa_nodes = 1;
    hwloc_topology_destroy(hw);
    return domain;
}

const char *context_host_name(const struct chorus_context *context, int rank)
{
    if (context->host_names == NULL || rank < 0 || rank >= context->size)
        return "?";
    return context->host_names[rank];
}

/* Whether a host's `local_size` ranks outnumber the processing units their bindings allow
 * together (`binding`: the OR of theirs; all zero when unknown, and then `own_pus`, this rank's
 * own count, as before). Each rank's own count would say so of ranks bound to a core each (one
 * PU each), which never take turns. */
static bool ranks_outnumber_pus(const unsigned long *binding, size_t own_pus, int local_size)
{
    size_t host_pus = 0;
    for (int w = 0; w < TOPOLOGY_BINDING_WORDS; w++)
        host_pus += (size_t)__builtin_popcountl(binding[w]);
    if (host_pus == 0)
        host_pus = own_pus;
    return host_pus > 0 && (size_t)local_size > host_pus;
}

/* Every rank learns every rank's host name (64 bytes a rank: 64 KiB at 1,024 ranks). */
static bool gather_host_names(struct chorus_context *context)
{
    char mine[MPI_MAX_PROCESSOR_NAME] = "";
    int length = 0;
    if (MPI_Get_processor_name(mine, &length) != MPI_SUCCESS)
        snprintf(mine, sizeof mine, "?");
    char name[CHORUS_HOST_NAME_SIZE];
    snprintf(name, sizeof name, "%s", mine);
    context->host_names = calloc((size_t)context->size, sizeof *context->host_names);
    return context->host_names != NULL &&
           MPI_Allgather(name, CHORUS_HOST_NAME_SIZE, MPI_CHAR, context->host_names,
                         CHORUS_HOST_NAME_SIZE, MPI_CHAR, context->control_comm) == MPI_SUCCESS;
}

chorus_status topology_discover(struct chorus_context *context, char *error, size_t error_size)
{
    chorus_topology *topology = &context->topology;
    MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
    chorus_status status = CHORUS_ERR_MPI;
    topology->struct_size = sizeof *topology;
    topology->rank = context->rank;
    topology->size = context->size;
    if (MPI_Comm_split_type(context->control_comm, MPI_COMM_TYPE_SHARED, context->rank,
                            MPI_INFO_NULL, &local) != MPI_SUCCESS)
        goto out;
    if (MPI_Comm_rank(local, &topology->local_rank) != MPI_SUCCESS ||
        MPI_Comm_size(local, &topology->local_size) != MPI_SUCCESS)
        goto out;
    /* The local leaders (local rank 0) number the hosts in the order of their ranks. */
    if (MPI_Comm_split(context->control_comm, topology->local_rank, context->rank, &cross) !=
        MPI_SUCCESS)
        goto out;
    int host_index = 0;
    if (topology->local_rank == 0 && MPI_Comm_rank(cross, &host_index) != MPI_SUCCESS)
        goto out;
    if (MPI_Bcast(&host_index, 1, MPI_INT, 0, local) != MPI_SUCCESS)
        goto out;
    topology->cross_rank = host_index;
    int extremes[3] = {host_index, topology->local_size, -topology->local_size};
    int reduced[3];
    if (MPI_Allreduce(extremes, reduced, 3, MPI_INT, MPI_MAX, context->control_comm) !=
        MPI_SUCCESS)
        goto out;
    topology->cross_size = reduced[0] + 1;
    topology->homogeneous = reduced[1] == -reduced[2];
    /* The ranks of a host share a last-level cache when every one of them may run only under
     * the same one: all domains equal (max == min) and none spanning several (-1). */
    unsigned long binding[TOPOLOGY_BINDING_WORDS] = {0};
    int domain = count_cpus(topology, binding);
    int domains[2] = {domain, -domain};
    if (MPI_Allreduce(MPI_IN_PLACE, domains, 2, MPI_INT, MPI_MAX, local) != MPI_SUCCESS)
        goto out;
    context->local_ranks_share_cache = domains[0] == -domains[1] && domains[0] >= 0;
    /* More ranks than processing units among all that the host's ranks may run on. */
    if (MPI_Allreduce(MPI_IN_PLACE, binding, TOPOLOGY_BINDING_WORDS, MPI_UNSIGNED_LONG, MPI_BOR,
                      local) != MPI_SUCCESS)
        goto out;
    context->local_ranks_share_cores =
        ranks_outnumber_pus(binding, topology->pus, topology->local_size);
    if (!gather_host_names(context))
        goto out;
    status = CHORUS_OK;
out:
    if (status != CHORUS_OK)
        snprintf(error, error_size, "topology discovery failed in an MPI call");
    if (local != MPI_COMM_NULL)
        MPI_Comm_free(&local);
    if (cross != MPI_COMM_NULL)
        MPI_Comm_free(&cross);
    return status;
}

void topology_own_record(struct chorus_context *context, const char *host,
                         struct topology_record *mine)
{
    memset(mine, 0, sizeof *mine);
    char name[256] = "?";
    if (host == NULL && gethostname(name, sizeof name) != 0)
        snprintf(name, sizeof name, "?");
    snprintf(mine->host, sizeof mine->host, "%.*s", (int)sizeof mine->host - 1,
             host != NULL ? host : name);
    mine->cache_domain = count_cpus(&context->topology, mine->binding);
    mine->pus = (uint32_t)context->topology.pus;
}

/* What the ranks on `host` (host_of[r] == host) share: one last-level cache when every one may
 * run only under the same one; fewer processing units than ranks (ranks_outnumber_pus). */
static void fold_host(struct chorus_context *context, const struct topology_record *records,
                      const int *host_of, int host)
{
    int first_domain = -2;
    bool one_domain = true;
    unsigned long binding[TOPOLOGY_BINDING_WORDS] = {0};
    for (int r = 0; r < context->size; r++) {
        if (host_of[r] != host)
            continue;
        if (first_domain == -2)
            first_domain = records[r].cache_domain;
        one_domain = one_domain && records[r].cache_domain == first_domain;
        for (int w = 0; w < TOPOLOGY_BINDING_WORDS; w++)
            binding[w] |= records[r].binding[w];
    }
    context->local_ranks_share_cache = one_domain && first_domain >= 0;
    context->local_ranks_share_cores = ranks_outnumber_pus(binding, records[context->rank].pus,
                                                           context->topology.local_size);
}

chorus_status topology_from_records(struct chorus_context *context,
                                    const struct topology_record *records, char *error,
                                    size_t error_size)
{
    int size = context->size, rank = context->rank;
    int *host_of = calloc((size_t)size, sizeof *host_of);
    int *ranks_on = calloc((size_t)size, sizeof *ranks_on);
    char(*names)[CHORUS_HOST_NAME_SIZE] = calloc((size_t)size, sizeof *names);
    if (host_of == NULL || ranks_on == NULL || names == NULL) {
        free(host_of);
        free(ranks_on);
        free(names);
        snprintf(error, error_size, "out of memory for the topology of %d ranks", size);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    /* Hosts are numbered by their first rank, as the local leaders number them over MPI. */
    int hosts = 0;
    for (int r = 0; r < size; r++) {
        memcpy(names[r], records[r].host, CHORUS_HOST_NAME_SIZE);
        names[r][CHORUS_HOST_NAME_SIZE - 1] = '\0';
        host_of[r] = hosts;
        for (int q = 0; q < r; q++)
            if (strcmp(names[q], names[r]) == 0) {
                host_of[r] = host_of[q];
                break;
            }
        if (host_of[r] == hosts)
            hosts++;
        ranks_on[host_of[r]]++;
    }
    chorus_topology *topology = &context->topology;
    topology->struct_size = sizeof *topology;
    topology->rank = rank;
    topology->size = size;
    topology->local_rank = 0;
    for (int q = 0; q < rank; q++)
        topology->local_rank += host_of[q] == host_of[rank];
    topology->local_size = ranks_on[host_of[rank]];
    topology->cross_rank = host_of[rank];
    topology->cross_size = hosts;
    topology->homogeneous = true;
    for (int h = 0; h < hosts; h++)
        topology->homogeneous = topology->homogeneous && ranks_on[h] == ranks_on[0];
    fold_host(context, records, host_of, host_of[rank]);
    free(context->host_names);
    context->host_names = names;
    free(host_of);
    free(ranks_on);
    return CHORUS_OK;
}
