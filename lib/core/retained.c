/*
 * retained.c — see retained.h. A list of blocks, each holding many pointers, so that retaining
 * allocates rarely.
 */
#include "retained.h"

#include <pthread.h>
#include <stdlib.h>

enum { POINTERS_PER_BLOCK = 62 };

struct retained_block {
    struct retained_block *next;
    size_t count;
    void *memory[POINTERS_PER_BLOCK];
};

static pthread_mutex_t retained_lock = PTHREAD_MUTEX_INITIALIZER;
static struct retained_block *retained_blocks;

void retained_keep(void *memory)
{
    if (memory == NULL)
        return;
    pthread_mutex_lock(&retained_lock);
    struct retained_block *block = retained_blocks;
    if (block == NULL || block->count == POINTERS_PER_BLOCK) {
        block = calloc(1, sizeof *block);
        if (block != NULL) {
            block->next = retained_blocks;
            retained_blocks = block;
        }
    }
    /* Out of memory: the block is not kept, which only costs what it would have freed. */
    if (block != NULL)
        block->memory[block->count++] = memory;
    pthread_mutex_unlock(&retained_lock);
}

void retained_free_all(void)
{
    pthread_mutex_lock(&retained_lock);
    while (retained_blocks != NULL) {
        struct retained_block *block = retained_blocks;
        retained_blocks = block->next;
        for (size_t i = 0; i < block->count; i++)
            free(block->memory[i]);
        free(block);
    }
    pthread_mutex_unlock(&retained_lock);
}
