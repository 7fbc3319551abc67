/*
 * rank_links.h — what the unit tests' ranks, threads of one process, run the whole background
 * loop over: a negotiation channel, a transport, and the abort notices between them. Either
 * the thread channel and transport (rank_links_threads.c), or a UCX channel and transport, each
 * on a fabric of its own per rank, as an elastic world's ranks have (rank_links_ucx.c; the
 * abort notices still go between threads). A test program is linked with one of them.
 */
#ifndef CHORUS_TEST_RANK_LINKS_H
#define CHORUS_TEST_RANK_LINKS_H

#include "../../lib/negotiation/channel.h"
#include "../../lib/transport/point_to_point.h"

struct rank_links;

struct rank_links *rank_links_create(int nranks);
/* After every rank's loop ended. */
void rank_links_destroy(struct rank_links *links);
/* Rank `rank`'s channel and transport, and the state channel_threads_poll_abort and
 * channel_threads_notify_abort take for its abort notices. */
void rank_links_init(struct rank_links *links, int rank, struct channel *channel,
                     struct transport *transport, void **abort_state);
/* The next message `rank` receives on its channel is replaced by bytes that do not decode. */
void rank_links_corrupt_next(struct rank_links *links, int rank);
/* "threads" or "ucx", for messages. */
const char *rank_links_kind(void);

#endif
