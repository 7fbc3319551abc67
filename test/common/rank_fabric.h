/*
 * rank_fabric.h — the point-to-point transport the unit tests' ranks, threads of one process,
 * talk over: the thread transport (rank_fabric_threads.c), or UCX with one worker per rank and
 * the addresses exchanged in memory (rank_fabric_ucx.c). A test program is linked with one of
 * them, so that one file of checks runs the algorithms over either.
 */
#ifndef CHORUS_TEST_RANK_FABRIC_H
#define CHORUS_TEST_RANK_FABRIC_H

#include "../../lib/transport/point_to_point.h"

/* `nranks` ranks connected to one another; a failure fails the Check test. */
struct rank_fabric *rank_fabric_create(int nranks);
/* Done with it, after every rank's thread has ended. `reusable`: every message sent was
 * received (every rank's calls succeeded), so that the next rank_fabric_create of as many ranks
 * may hand it out again, as UCX's take a while to connect. NULL is ignored. */
void rank_fabric_release(struct rank_fabric *fabric, bool reusable);
/* Rank `rank`'s transport; used only by that rank's thread. */
void rank_fabric_transport(struct rank_fabric *fabric, int rank, struct transport *transport);
/* The transport's name: "threads" or "ucx". */
const char *rank_fabric_kind(void);

#endif
