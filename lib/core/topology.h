/*
 * topology.h — what topology.c finds with hwloc, for the tests that give it made-up machines.
 */
#ifndef CHORUS_TOPOLOGY_H
#define CHORUS_TOPOLOGY_H

#include <hwloc.h>

/* The logical index of the last-level cache that every CPU of `cpus` sits under, or -1 when they
 * span several (or hwloc knows no caches). Unpinned ranks may run on any CPU of the host: one
 * domain only where the host has one last-level cache. */
int topology_cache_domain(hwloc_topology_t hw, hwloc_const_cpuset_t cpus);

#endif
