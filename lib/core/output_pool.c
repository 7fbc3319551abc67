/*
 * output_pool.c — see output_pool.h. A handful of slots, bounded in total bytes.
 */
#include "output_pool.h"

#include <pthread.h>
#include <stdlib.h>

#define POOL_SLOTS 8
#define POOL_MAX_BYTES ((size_t)1 << 30)

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *buffer;
    size_t capacity;
} pool[POOL_SLOTS];
static size_t pooled_bytes;

void *output_pool_take(size_t bytes, size_t *capacity)
{
    if (bytes == 0)
        bytes = 1;
    pthread_mutex_lock(&pool_lock);
    int best = -1;
    for (int i = 0; i < POOL_SLOTS; i++) {
        size_t size = pool[i].capacity;
        if (pool[i].buffer != NULL && size >= bytes && size / 2 <= bytes &&
            (best < 0 || size < pool[best].capacity))
            best = i;
    }
    void *buffer = NULL;
    if (best >= 0) {
        buffer = pool[best].buffer;
        *capacity = pool[best].capacity;
        pooled_bytes -= pool[best].capacity;
        pool[best].buffer = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    if (buffer != NULL)
        return buffer;
    *capacity = bytes;
    return malloc(bytes);
}

void output_pool_give(void *buffer, size_t capacity)
{
    if (buffer == NULL)
        return;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SLOTS && pooled_bytes + capacity <= POOL_MAX_BYTES; i++) {
        if (pool[i].buffer == NULL) {
            pool[i].buffer = buffer;
            pool[i].capacity = capacity;
            pooled_bytes += capacity;
            buffer = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    free(buffer);
}

void output_pool_drain(void)
{
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SLOTS; i++) {
        free(pool[i].buffer);
        pool[i].buffer = NULL;
    }
    pooled_bytes = 0;
    pthread_mutex_unlock(&pool_lock);
}
