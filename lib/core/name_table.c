/*
 * name_table.c — see name_table.h. FNV-1a hashing of the set and the name; names are copied
 * into the entries, whose
 * storage is reused after a remove (sized to NAME_TABLE_MIN_STORAGE at least, so most names fit
 * any spare).
 */
#include "name_table.h"

#include <stdlib.h>
#include <string.h>

enum { NAME_TABLE_SPARES = 256, NAME_TABLE_MIN_STORAGE = 96 };

static size_t hash_name(int set, const char *name)
{
    uint64_t hash = 1469598103934665603ull ^ (uint32_t)set;
    hash *= 1099511628211ull;
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

static void free_chain(struct name_entry *entry)
{
    while (entry != NULL) {
        struct name_entry *next = entry->next;
        free(entry);
        entry = next;
    }
}

void name_table_destroy(struct name_table *table)
{
    for (size_t i = 0; i < table->bucket_count; i++)
        free_chain(table->buckets[i]);
    free_chain(table->spares);
    free(table->buckets);
    memset(table, 0, sizeof *table);
}

static bool same_key(const struct name_entry *entry, int set, const char *name)
{
    return entry->set == set && strcmp(entry->name, name) == 0;
}

static struct name_entry *find_hashed(const struct name_table *table, int set, const char *name,
                                      size_t hash)
{
    if (table->bucket_count == 0)
        return NULL;
    for (struct name_entry *entry = table->buckets[hash % table->bucket_count]; entry != NULL;
         entry = entry->next)
        if (same_key(entry, set, name))
            return entry;
    return NULL;
}

void *name_table_find(const struct name_table *table, int set, const char *name)
{
    struct name_entry *entry = find_hashed(table, set, name, hash_name(set, name));
    return entry != NULL ? entry->value : NULL;
}

/* An entry with room for `length` bytes and its terminator: a spare when one has room. */
static struct name_entry *take_entry(struct name_table *table, size_t length)
{
    for (struct name_entry **link = &table->spares; *link != NULL; link = &(*link)->next) {
        if ((*link)->capacity > length) {
            struct name_entry *entry = *link;
            *link = entry->next;
            table->spare_count--;
            return entry;
        }
    }
    size_t capacity = length + 1 > NAME_TABLE_MIN_STORAGE ? length + 1 : NAME_TABLE_MIN_STORAGE;
    struct name_entry *entry = malloc(sizeof *entry + capacity);
    if (entry != NULL)
        entry->capacity = capacity;
    return entry;
}

static void give_back_entry(struct name_table *table, struct name_entry *entry)
{
    if (table->spare_count >= NAME_TABLE_SPARES) {
        free(entry);
        return;
    }
    entry->next = table->spares;
    table->spares = entry;
    table->spare_count++;
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
            size_t index = hash_name(entry->set, entry->name) % bucket_count;
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

bool name_table_insert(struct name_table *table, int set, const char *name, void *value)
{
    size_t hash = hash_name(set, name);
    if (find_hashed(table, set, name, hash) != NULL)
        return false;
    if (table->size >= table->bucket_count && !grow(table))
        return false;
    size_t length = strlen(name);
    struct name_entry *entry = take_entry(table, length);
    if (entry == NULL)
        return false;
    memcpy(entry->storage, name, length + 1);
    size_t index = hash % table->bucket_count;
    entry->name = entry->storage;
    entry->set = set;
    entry->value = value;
    entry->next = table->buckets[index];
    table->buckets[index] = entry;
    table->size++;
    return true;
}

void *name_table_remove(struct name_table *table, int set, const char *name)
{
    if (table->bucket_count == 0)
        return NULL;
    struct name_entry **link = &table->buckets[hash_name(set, name) % table->bucket_count];
    for (; *link != NULL; link = &(*link)->next) {
        if (same_key(*link, set, name)) {
            struct name_entry *entry = *link;
            void *value = entry->value;
            *link = entry->next;
            give_back_entry(table, entry);
            table->size--;
            return value;
        }
    }
    return NULL;
}
