/*
 * copier.c — see copier.h. The queue is a ring of COPIER_QUEUE jobs indexed by ticket: job t
 * sits in slot t % COPIER_QUEUE, is pending while completed < t + 1, and its slot is free again
 * once it has run.
 */
#include "copier.h"

#include <sched.h>

/* A segment of a fusion buffer is copied in well under a millisecond, so a waiter spins that
 * long before it sleeps; sleeping costs a wake-up on the critical path. */
#define COPIER_SPINS 4096

static void *copier_main(void *argument)
{
    struct copier *copier = argument;
    pthread_mutex_lock(&copier->lock);
    for (;;) {
        uint64_t next = atomic_load_explicit(&copier->completed, memory_order_relaxed);
        if (next == copier->submitted) {
            if (copier->stopping)
                break;
            pthread_cond_wait(&copier->wake, &copier->lock);
            continue;
        }
        struct copier_job job = copier->jobs[next % COPIER_QUEUE];
        pthread_mutex_unlock(&copier->lock);
        job.run(job.argument);
        pthread_mutex_lock(&copier->lock);
        atomic_store_explicit(&copier->completed, next + 1, memory_order_release);
        pthread_cond_broadcast(&copier->done);
    }
    pthread_mutex_unlock(&copier->lock);
    return NULL;
}

bool copier_start(struct copier *copier)
{
    copier->submitted = 0;
    atomic_init(&copier->completed, 0);
    copier->stopping = false;
    copier->running = false;
    if (pthread_mutex_init(&copier->lock, NULL) != 0)
        return false;
    if (pthread_cond_init(&copier->wake, NULL) != 0) {
        pthread_mutex_destroy(&copier->lock);
        return false;
    }
    if (pthread_cond_init(&copier->done, NULL) != 0) {
        pthread_cond_destroy(&copier->wake);
        pthread_mutex_destroy(&copier->lock);
        return false;
    }
    if (pthread_create(&copier->thread, NULL, copier_main, copier) != 0) {
        pthread_cond_destroy(&copier->done);
        pthread_cond_destroy(&copier->wake);
        pthread_mutex_destroy(&copier->lock);
        return false;
    }
    copier->running = true;
    return true;
}

void copier_stop(struct copier *copier)
{
    if (!copier->running)
        return;
    pthread_mutex_lock(&copier->lock);
    copier->stopping = true;
    pthread_cond_signal(&copier->wake);
    pthread_mutex_unlock(&copier->lock);
    pthread_join(copier->thread, NULL);
    pthread_cond_destroy(&copier->done);
    pthread_cond_destroy(&copier->wake);
    pthread_mutex_destroy(&copier->lock);
    copier->running = false;
}

uint64_t copier_submit(struct copier *copier, void (*run)(void *argument), void *argument)
{
    pthread_mutex_lock(&copier->lock);
    while (copier->submitted - atomic_load_explicit(&copier->completed, memory_order_relaxed) ==
           COPIER_QUEUE)
        pthread_cond_wait(&copier->done, &copier->lock);
    uint64_t ticket = copier->submitted++;
    copier->jobs[ticket % COPIER_QUEUE] = (struct copier_job){run, argument};
    pthread_cond_signal(&copier->wake);
    pthread_mutex_unlock(&copier->lock);
    return ticket;
}

void copier_wait(struct copier *copier, uint64_t ticket)
{
    for (int spin = 0; spin < COPIER_SPINS; spin++) {
        if (atomic_load_explicit(&copier->completed, memory_order_acquire) > ticket)
            return;
        if (spin % 64 == 63)
            sched_yield();
    }
    pthread_mutex_lock(&copier->lock);
    while (atomic_load_explicit(&copier->completed, memory_order_acquire) <= ticket)
        pthread_cond_wait(&copier->done, &copier->lock);
    pthread_mutex_unlock(&copier->lock);
}
