/*
 * coordinator.h — the one header of lib/coordinator that other folders include: the
 * background thread of a rank, which negotiates with rank 0 (the coordinator) and hands what
 * is agreed to the executor.
 */
#ifndef CHORUS_COORDINATOR_H
#define CHORUS_COORDINATOR_H

/* The background thread's entry point; its argument is the instance's struct chorus_context.
 * It reports its start-up through the context (see context.h) and returns after shutdown. */
void *coord_thread_main(void *context);

#endif
