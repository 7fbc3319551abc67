/*
 * test_topology.c — the cache domain that decides how staging areas are written
 * (topology_cache_domain, staging_stores_streaming), on machines made up with hwloc's synthetic
 * topologies: two sockets of one L3 each, four cores per L3.
 */
#include "../../lib/transport/node_segment.h"
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

int main(void)
{
    Suite *suite = suite_create("topology");
    TCase *cases = tcase_create("cache_domain");
    tcase_add_test(cases, ranks_under_one_last_level_cache_share_a_domain);
    tcase_add_test(cases, staging_stores_follow_the_topology_unless_forced);
    suite_add_tcase(suite, cases);
    return run_suite(suite);
}
