/*
 * coordinator.h — the one header of lib/coordinator that other folders include: the
 * background thread of a rank, which negotiates with rank 0 (the coordinator) and hands what
 * is agreed to the executor.
 */
#ifndef CHORUS_COORDINATOR_H
#define CHORUS_COORDINATOR_H

#include <stdbool.h>

/* The background thread's entry point; its argument is the instance's struct chorus_context.
 * It reports its start-up through the context (see context.h) and returns after shutdown. */
void *coord_thread_main(void *context);

struct chorus_context;
/* A user thread that queued ordered operations (CHORUS_OP_ORDERED) runs them itself, as the
 * background thread would, when the thread's turn is free (it is idle) and only ordered
 * operations are queued: this saves the two hand-offs between the threads. The turn (a mutex
 * the background thread holds except while idle) makes the two never act at once. Returns
 * whether it ran them; if not, the background thread will (wake it). */
bool coord_step_as_caller(struct chorus_context *context);

struct chorus_handle;
/* A user thread that waits for `handle` turns the background thread's loop itself while the
 * turn is free, until the handle completes or nothing has happened for a while: the waiting
 * thread then does what the background thread would have woken to do, and no hand-off between
 * the two threads (each a context switch where they share a core) sits on the operation's path.
 * Returns whether it took the turn. */
bool coord_drive(struct chorus_context *context, const struct chorus_handle *handle);

#endif
