/*
 * name_table.c — see name_table.h. FNV-1a hashing; names are copied into the entries.
 */
#include "name_table.h"

#include <stdlib.h>
#include <string.h>

static size_t hash_name(const char *name)
{
    uint64_t hash = 1469598103934665603ull;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        hash ^= *c;
        hash *= 1099511628211ull;
    }
    return (size_t)hash;
}

void name_table_init(struct name_table *table)
{
    memset(table, 0, sizeof *table);
}

void name_table_destroy(struct name_table *table)
{
    for (size_t i = 0; i < table->bucket_count; i++) {
        struct name_entry *entry = table->buckets[i];
        while (entry != NULL) {
            struct name_entry *next = entry->next;
            free(entry->name);
            free(entry);
            entry = next;
        }
    }
    free(table->buckets);
    memset(table, 0, sizeof *table);
}

void *name_table_find(const struct name_table *table, const char *name)
{
    if (table->bucket_count == 0)
        return NULL;
    for (struct name_entry *entry = table->buckets[hash_name(name) % table->bucket_count];
         entry != NULL; entry = entry->next)
        if (strcmp(entry->name, name) == 0)
            return entry->value;
    return NULL;
}

static bool grow(struct name_table *table)
{
    size_t bucket_count = table->bucket_count ? table->bucket_count * 2 : 64;
    struct name_entry **buckets = calloc(bucket_count, sizeof *buckets);
    if (buckets == NULL)
        return false;
    for (size_t i = 0; i < table->bucket_count; i++) {
        struct name_entry *entry = table->buckets[i];
        while (entry != NULL) {
            struct name_entry *next = entry->next;
            size_t index = hash_name(entry->name) % bucket_count;
            entry->next = buckets[index];
            buckets[index] = entry;
            entry = next;
        }
    }
    free(table->buckets);
    table->buckets = buckets;
    table->bucket_count = bucket_count;
    return true;
}

bool name_table_insert(struct name_table *table, const char *name, void *value)
{
    if (name_table_find(table, name) != NULL)
        return false;
    if (table->size >= table->bucket_count && !grow(table))
        return false;
    struct name_entry *entry = malloc(sizeof *entry);
    char *copy = strdup(name);
    if (entry == NULL || copy == NULL) {
        free(entry);
        free(copy);
        return false;
    }
    size_t index = hash_name(name) % table->bucket_count;
    *entry = (struct name_entry){.name = copy, .value = value, .next = table->buckets[index]};
    table->buckets[index] = entry;
    table->size++;
    return true;
}

void *name_table_remove(struct name_table *table, const char *name)
{
    if (table->bucket_count == 0)
        return NULL;
    struct name_entry **link = &table->buckets[hash_name(name) % table->bucket_count];
    for (; *link != NULL; link = &(*link)->next) {
        if (strcmp((*link)->name, name) == 0) {
            struct name_entry *entry = *link;
            void *value = entry->value;
            *link = entry->next;
            free(entry->name);
            free(entry);
            table->size--;
            return value;
        }
    }
    return NULL;
}
