/*
 * test_topology.c — the cache domain that decides how staging areas are written
 * (topology_cache_domain, staging_stores_streaming), on machines made up with hwloc's synthetic
 * topologies: two sockets of one L3 each, four cores per L3; and the topology a world without
 * MPI finds from every rank's record (topology_from_records), on made-up hosts.
 */
#include "../../lib/transport/node_segment.h"
#include "../../lib/core/context.h"
#include "../../lib/core/topology.h"
#include "../common/check_runner.h"

static hwloc_topology_t synthetic(const char *description)
{
    hwloc_topology_t hw;
    ck_assert_int_eq(hwloc_topology_init(&hw), 0);
    ck_assert_int_eq(hwloc_topology_set_synthetic(hw, description), 0);
    ck_assert_int_eq(hwloc_topology_load(hw), 0);
    return hw;
}

/* The domain of the CPUs (processing units by logical index) from `first` to `last`. */
static int domain_of(hwloc_topology_t hw, unsigned first, unsigned last)
{
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    for (unsigned pu = first; pu <= last; pu++)
        hwloc_bitmap_or(cpus, cpus, hwloc_get_obj_by_type(hw, HWLOC_OBJ_PU, pu)->cpuset);
    int domain = topology_cache_domain(hw, cpus);
    hwloc_bitmap_free(cpus);
    return domain;
}

START_TEST(ranks_under_one_last_level_cache_share_a_domain)
{
    hwloc_topology_t hw = synthetic("package:2 l3:1 l2:4 core:1 pu:1");
    ck_assert_int_eq(domain_of(hw, 0, 0), 0);  /* pinned to core 0 */
    ck_assert_int_eq(domain_of(hw, 3, 3), 0);  /* core 3: the same L3 */
    ck_assert_int_eq(domain_of(hw, 4, 4), 1);  /* core 4: the other socket's */
    ck_assert_int_eq(domain_of(hw, 0, 3), 0);  /* bound to the first socket */
    ck_assert_int_eq(domain_of(hw, 2, 5), -1); /* across both */
    ck_assert_int_eq(domain_of(hw, 0, 7), -1); /* unpinned on two sockets */
    hwloc_topology_destroy(hw);
    /* One L3 for the whole machine (the development VM): unpinned ranks share it. */
    hw = synthetic("package:1 l3:1 l2:2 core:1 pu:1");
    ck_assert_int_eq(domain_of(hw, 0, 1), 0);
    hwloc_topology_destroy(hw);
    /* No caches known: no domain. */
    hw = synthetic("package:1 core:2 pu:1");
    ck_assert_int_eq(domain_of(hw, 0, 0), -1);
    hwloc_topology_destroy(hw);
}
END_TEST

START_TEST(staging_stores_follow_the_topology_unless_forced)
{
    /* auto: ordinary stores only for ranks under one cache, each with a core of its own */
    ck_assert(!staging_stores_streaming(STAGING_STORES_AUTO, true, false));
    ck_assert(staging_stores_streaming(STAGING_STORES_AUTO, false, false));
    ck_assert(staging_stores_streaming(STAGING_STORES_AUTO, true, true));
    /* forced either way */
    ck_assert(!staging_stores_streaming(STAGING_STORES_CACHED, false, true));
    ck_assert(staging_stores_streaming(STAGING_STORES_STREAMING, true, false));
}
END_TEST

/* Ranks on hosts named `hosts` ("b" "a" "b" "c" "a": rank 0 on host b, ...); each rank's
 * cache domain and one-word binding. */
struct made_up_rank {
    const char *host;
    int domain;
    unsigned long binding;
    uint32_t pus;
};

static struct chorus_context *topology_of(const struct made_up_rank *ranks, int size, int rank)
{
    struct topology_record records[8];
    memset(records, 0, sizeof records);
    for (int r = 0; r < size; r++) {
        snprintf(records[r].host, sizeof records[r].host, "%s", ranks[r].host);
        records[r].cache_domain = ranks[r].domain;
        records[r].binding[0] = ranks[r].binding;
        records[r].pus = ranks[r].pus;
    }
    struct chorus_context *context = context_create(MPI_COMM_NULL);
    context->rank = rank;
    context->size = size;
    char error[128];
    ck_assert_int_eq(topology_from_records(context, records, error, sizeof error), CHORUS_OK);
    return context;
}

START_TEST(a_world_without_mpi_finds_its_hosts_from_the_records)
{
    /* Hosts in mixed order, 2 + 2 + 1 ranks: b (ranks 0, 2), a (1, 4), c (3). */
    static const struct made_up_rank ranks[] = {
        {"b", 0, 0x1, 1}, {"a", 1, 0x3, 2}, {"b", 0, 0x2, 1}, {"c", -1, 0, 4}, {"a", 2, 0x3, 2}};
    static const int local_rank[] = {0, 0, 1, 0, 1}, local_size[] = {2, 2, 2, 1, 2};
    static const int cross_rank[] = {0, 1, 0, 2, 1};
    /* b: one domain, cores 0 and 1 for 2 ranks; a: two domains, 2 PUs for 2 ranks; c: no
     * binding known, its own 4 PUs for 1 rank, no domain. */
    static const bool share_cache[] = {true, false, true, false, false};
    for (int rank = 0; rank < 5; rank++) {
        struct chorus_context *context = topology_of(ranks, 5, rank);
        const chorus_topology *topology = &context->topology;
        ck_assert_int_eq(topology->rank, rank);
        ck_assert_int_eq(topology->size, 5);
        ck_assert_int_eq(topology->local_rank, local_rank[rank]);
        ck_assert_int_eq(topology->local_size, local_size[rank]);
        ck_assert_int_eq(topology->cross_rank, cross_rank[rank]);
        ck_assert_int_eq(topology->cross_size, 3);
        ck_assert(!topology->homogeneous);
        ck_assert_int_eq(context->local_ranks_share_cache, share_cache[rank]);
        ck_assert(!context->local_ranks_share_cores);
        ck_assert_str_eq(context_host_name(context, 3), "c");
        context_free(context);
    }
    /* Two hosts of two ranks, each host's ranks bound to the same single PU: they take turns. */
    static const struct made_up_rank crowded[] = {
        {"x", 0, 0x1, 1}, {"x", 0, 0x1, 1}, {"y", 0, 0x4, 1}, {"y", 0, 0x4, 1}};
    for (int rank = 0; rank < 4; rank++) {
        struct chorus_context *context = topology_of(crowded, 4, rank);
        ck_assert(context->topology.homogeneous);
        ck_assert_int_eq(context->topology.cross_size, 2);
        ck_assert_int_eq(context->topology.local_rank, rank % 2);
        ck_assert(context->local_ranks_share_cores && context->local_ranks_share_cache);
        context_free(context);
    }
    /* One rank alone. */
    struct chorus_context *alone = topology_of(crowded, 1, 0);
    ck_assert_int_eq(alone->topology.local_size, 1);
    ck_assert_int_eq(alone->topology.cross_size, 1);
    ck_assert(alone->topology.homogeneous && !alone->local_ranks_share_cores);
    context_free(alone);
}
END_TEST

/* This rank's own record: the named host, and what hwloc says of this process's binding. */
START_TEST(a_rank_records_its_host_and_binding)
{
    struct chorus_context *context = context_create(MPI_COMM_NULL);
    struct topology_record mine;
    topology_own_record(context, "host-7", &mine);
    ck_assert_str_eq(mine.host, "host-7");
    ck_assert_uint_gt(mine.pus, 0);
    ck_assert_uint_eq(mine.pus, context->topology.pus);
    size_t bound = 0;
    for (int w = 0; w < TOPOLOGY_BINDING_WORDS; w++)
        bound += (size_t)__builtin_popcountl(mine.binding[w]);
    ck_assert_uint_eq(bound, mine.pus);
    topology_own_record(context, NULL, &mine);
    ck_assert(mine.host[0] != '\0');
    context_free(context);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("topology");
    TCase *cases = tcase_create("cache_domain");
    tcase_add_test(cases, ranks_under_one_last_level_cache_share_a_domain);
    tcase_add_test(cases, staging_stores_follow_the_topology_unless_forced);
    tcase_add_test(cases, a_world_without_mpi_finds_its_hosts_from_the_records);
    tcase_add_test(cases, a_rank_records_its_host_and_binding);
    suite_add_tcase(suite, cases);
    return run_suite(suite);
}
