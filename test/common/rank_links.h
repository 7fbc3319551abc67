/*
 * rank_links.h — what the unit tests' ranks, threads of one process, run the whole background
 * loop over: a negotiation channel, a transport, and the abort notices between them. Either
 * the thread channel and transport (rank_links_threads.c), or UCX's channel, abort notices and
 * transport, on two fabrics per rank, as an elastic world's ranks would have (rank_links_ucx.c).
 * A test program is linked with one of them.
 */
#ifndef CHORUS_TEST_RANK_LINKS_H
#define CHORUS_TEST_RANK_LINKS_H

#include "../../lib/executor/abort.h"
#include "../../lib/negotiation/channel.h"
#include "../../lib/transport/point_to_point.h"

struct rank_links;

/* How a rank's abort notices travel (executor_watch_aborts_through's arguments). */
struct rank_abort_hooks {
    bool (*poll)(void *context, struct abort_notice *notice);
    void (*notify)(void *context, const struct abort_notice *notice);
    void *context;
};

struct rank_links *rank_links_create(int nranks);
/* After every rank's loop ended. */
void rank_links_destroy(struct rank_links *links);
/* Rank `rank`'s channel, transport and abort notices. */
void rank_links_init(struct rank_links *links, int rank, struct channel *channel,
                     struct transport *transport, struct rank_abort_hooks *aborts);
/* The next message `rank` receives on its channel is replaced by bytes that do not decode. */
void rank_links_corrupt_next(struct rank_links *links, int rank);
/* "threads" or "ucx", for messages. */
const char *rank_links_kind(void);

#endif
