/*
 * process_set.c — see process_set.h. Jobs hold a handful of sets, so a list searched in order
 * does.
 */
#include "process_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct process_set *process_set_find(const struct process_set_table *table, int id)
{
    for (size_t i = 0; i < table->count; i++)
        if (table->sets[i].id == id)
            return &table->sets[i];
    return NULL;
}

int process_set_rank_of(const struct process_set *set, int rank)
{
    int low = 0, high = set->size - 1;
    while (low <= high) {
        int middle = low + (high - low) / 2;
        if (set->ranks[middle] == rank)
            return middle;
        if (set->ranks[middle] < rank)
            low = middle + 1;
        else
            high = middle - 1;
    }
    return -1;
}

void process_set_table_set_lane(struct process_set_table *table, int id, struct lane *lane)
{
    for (size_t i = 0; i < table->count; i++)
        if (table->sets[i].id == id)
            table->sets[i].lane = lane;
}

bool process_set_table_add(struct process_set_table *table, int id, const int *ranks, int size)
{
    if (table->count == table->capacity) {
        size_t capacity = table->capacity ? table->capacity * 2 : 4;
        struct process_set *grown = realloc(table->sets, capacity * sizeof *grown);
        if (grown == NULL)
            return false;
        table->sets = grown;
        table->capacity = capacity;
    }
    int *copy = malloc((size_t)size * sizeof *copy);
    if (copy == NULL)
        return false;
    memcpy(copy, ranks, (size_t)size * sizeof *copy);
    table->sets[table->count++] = (struct process_set){.id = id, .size = size, .ranks = copy};
    return true;
}

void process_set_table_remove(struct process_set_table *table, int id)
{
    for (size_t i = 0; i < table->count; i++) {
        if (table->sets[i].id != id)
            continue;
        free(table->sets[i].ranks);
        table->sets[i] = table->sets[--table->count];
        return;
    }
}

void process_set_table_destroy(struct process_set_table *table)
{
    for (size_t i = 0; i < table->count; i++)
        free(table->sets[i].ranks);
    free(table->sets);
    memset(table, 0, sizeof *table);
}

bool process_set_check_ranks(const int *ranks, int count, int nranks, char *error,
                             size_t error_size)
{
    if (ranks == NULL || count <= 0) {
        snprintf(error, error_size, "a process set needs at least one rank");
        return false;
    }
    for (int i = 0; i < count; i++) {
        if (ranks[i] < 0 || ranks[i] >= nranks) {
            snprintf(error, error_size, "rank %d is out of range for a job of %d ranks",
                     ranks[i], nranks);
            return false;
        }
        if (i > 0 && ranks[i] <= ranks[i - 1]) {
            snprintf(error, error_size, "the ranks must be listed in ascending order, once each "
                     "(%d follows %d)", ranks[i], ranks[i - 1]);
            return false;
        }
    }
    return true;
}

char *process_set_describe(const struct process_set *set)
{
    char *ranks = text_rank_list(set->ranks, (size_t)set->size);
    char *text = text_format("process set %d (%s %s)", set->id, set->size == 1 ? "rank" : "ranks",
                               ranks ? ranks : "?");
    free(ranks);
    return text;
}
