/*
 * rank_links.h — what the unit tests' ranks, threads of one process, run the whole background
 * loop over: a negotiation channel, a transport, and the abort notices between them. Either
 * the thread channel and transport (rank_links_threads.c), or UCX's channel, abort notices and
 * transport, on two fabrics per rank, as an elastic world's ranks would have (rank_links_ucx.c).
 * A test program is linked with one of them.
 */
#ifndef CHORUS_TEST_RANK_LINKS_H
#define CHORUS_TEST_RANK_LINKS_H

#include "../../lib/coordinator/world_links.h"

struct rank_links;

struct rank_links *rank_links_create(int nranks);
/* After every rank's loop ended. */
void rank_links_destroy(struct rank_links *links);
/* Rank `rank`'s links, as a world's maker hands them to chorus: its rank and the size, its
 * channel, transport and abort hooks (the host is the caller's to set; NULL). */
void rank_links_init(struct rank_links *links, int rank, struct world_links *world);
/* The next message `rank` receives on its channel is replaced by bytes that do not decode. */
void rank_links_corrupt_next(struct rank_links *links, int rank);
/* "threads" or "ucx", for messages. */
const char *rank_links_kind(void);

#endif
