/*
 * channel_threads.h — the coordinator's channel (lib/negotiation/channel.h) between threads of
 * one process, one rank per thread, and the abort notices with it, so that unit tests run the
 * whole background loop without MPI. Messages between two ranks keep their order, as MPI's do;
 * a round completes once every rank has posted it. A test may corrupt the next message to a
 * rank, to drive the fatal-error path.
 */
#ifndef CHORUS_TEST_CHANNEL_THREADS_H
#define CHORUS_TEST_CHANNEL_THREADS_H

#include "../../lib/negotiation/channel.h"
#include "../../lib/executor/abort.h"

struct channel_world;

struct channel_world *channel_world_create(int nranks);
void channel_world_destroy(struct channel_world *world);

/* Rank `rank`'s end of the world. */
void channel_threads_init(struct channel *channel, struct channel_world *world, int rank);

/* Abort notices between the world's ranks (abort.h's hooks; the context is the channel's
 * state). */
bool channel_threads_poll_abort(void *state, struct abort_notice *notice);
void channel_threads_notify_abort(void *state, const struct abort_notice *notice);

/* The next message `rank` receives is replaced by bytes that do not decode. */
void channel_world_corrupt_next(struct channel_world *world, int rank);

#endif
