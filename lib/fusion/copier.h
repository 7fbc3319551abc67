/*
 * copier.h — a helper thread that packs and unpacks fusion buffers while the background thread
 * runs the collective on another one. It only copies memory: it never calls MPI or NCCL.
 *
 * Jobs run one at a time in the order they were submitted; a job's ticket is its place in that
 * order, so waiting for a ticket also waits for every job before it. Only the background thread
 * submits and waits.
 */
#ifndef CHORUS_COPIER_H
#define CHORUS_COPIER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define COPIER_QUEUE 8

struct copier_job {
    void (*run)(void *argument);
    void *argument;
};

struct copier {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a job arrived, or stop */
    pthread_cond_t done; /* a job finished */
    struct copier_job jobs[COPIER_QUEUE];
    uint64_t submitted;         /* under lock */
    _Atomic uint64_t completed; /* read without the lock while spinning */
    bool stopping;
    bool running;
};

/* Starts the thread. Returns false (and leaves nothing to stop) when it cannot. */
bool copier_start(struct copier *copier);
/* Finishes the jobs already submitted, then ends the thread. Harmless when not running. */
void copier_stop(struct copier *copier);

/* Queues `run(argument)` and returns its ticket; waits for room when the queue is full. */
uint64_t copier_submit(struct copier *copier, void (*run)(void *argument), void *argument);
/* Returns once the job with `ticket`, and every job before it, has finished. */
void copier_wait(struct copier *copier, uint64_t ticket);

#endif
