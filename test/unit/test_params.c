/*
 * test_params.c — the parameter table: defaults, environment values, K/M/G suffixes, overrides
 * from chorus_init options, and errors that name the variable and the value.
 */
#include "../../lib/core/params.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static struct param_set set;
static char error[1024];

static chorus_status load(char *const *environment, const char *overrides)
{
    error[0] = '\0';
    return params_load(&set, environment, overrides, error, sizeof error);
}

START_TEST(defaults_when_nothing_is_set)
{
    char *environment[] = {"PATH=/bin", NULL};
    ck_assert_int_eq(load(environment, NULL), CHORUS_OK);
    ck_assert_uint_eq(set.values.fusion_threshold, (size_t)128 << 20);
    ck_assert(set.values.cycle_time_ms == 0);
    ck_assert_uint_eq(set.values.cache_capacity, 1024);
    ck_assert(set.values.stall_warning_seconds == 60);
    ck_assert(set.values.stall_shutdown_seconds == 0);
    ck_assert_str_eq(set.values.allreduce_algorithm, "auto");
    for (size_t i = 0; i < param_count; i++)
        ck_assert_int_eq(set.sources[i], PARAM_SOURCE_DEFAULT);
}
END_TEST

START_TEST(byte_suffixes)
{
    size_t bytes = 0;
    ck_assert(params_parse_bytes("64K", &bytes) && bytes == 65536);
    ck_assert(params_parse_bytes("128M", &bytes) && bytes == (size_t)128 << 20);
    ck_assert(params_parse_bytes("1g", &bytes) && bytes == (size_t)1 << 30);
    ck_assert(params_parse_bytes("2MiB", &bytes) && bytes == (size_t)2 << 20);
    ck_assert(params_parse_bytes("1048576", &bytes) && bytes == 1048576);
    ck_assert(params_parse_bytes("0", &bytes) && bytes == 0);
    ck_assert(!params_parse_bytes("-1", &bytes));
    ck_assert(!params_parse_bytes("12Q", &bytes));
    ck_assert(!params_parse_bytes("", &bytes));
    ck_assert(!params_parse_bytes("M", &bytes));
    ck_assert(!params_parse_bytes("99999999999999999999", &bytes));
    ck_assert(!params_parse_bytes("99999999999T", &bytes));
}
END_TEST

START_TEST(environment_values_and_sources)
{
    char *environment[] = {"CHORUS_FUSION_THRESHOLD=64M", "CHORUS_CYCLE_TIME_MS=2.5",
                           "CHORUS_LOG_LEVEL=debug", "CHORUS_ALLREDUCE_ALGO=ring",
                           "CHORUS_STAGING_STORES=Streaming", "CHORUS_TYPO=1", NULL};
    ck_assert_int_eq(load(environment, NULL), CHORUS_OK);
    ck_assert_uint_eq(set.values.fusion_threshold, (size_t)64 << 20);
    ck_assert_int_eq(set.values.staging_stores, 2);
    ck_assert(set.values.cycle_time_ms == 2.5);
    ck_assert_int_eq(set.values.log_level, 3);
    ck_assert_str_eq(set.values.allreduce_algorithm, "ring");
    ck_assert_int_eq(set.sources[param_index("CHORUS_FUSION_THRESHOLD")], PARAM_SOURCE_ENVIRONMENT);
    ck_assert_str_eq(set.unknown_variables, "CHORUS_TYPO");
}
END_TEST

/* A Horovod job script's variables are read as their CHORUS_* namesakes; CHORUS_* wins. */
START_TEST(horovod_variables_are_aliases)
{
    char *environment[] = {"HOROVOD_FUSION_THRESHOLD=1048576", "HOROVOD_CYCLE_TIME=3.5",
                           "HOROVOD_CACHE_CAPACITY=9", "CHORUS_CACHE_CAPACITY=7",
                           "HOROVOD_TIMELINE=/tmp/t.json", "HOROVOD_STALL_CHECK_TIME_SECONDS=5",
                           "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=30", "HOROVOD_LOG_LEVEL=fatal",
                           "HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_AUTOTUNE=1",
                           "HOROVOD_AUTOTUNE_LOG=/tmp/a.csv",
                           "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=10", NULL};
    ck_assert_int_eq(load(environment, NULL), CHORUS_OK);
    ck_assert(set.values.autotune);
    ck_assert_str_eq(set.values.autotune_log, "/tmp/a.csv");
    ck_assert_uint_eq(set.values.autotune_steps_per_trial, 10);
    ck_assert_int_eq(set.sources[param_index("CHORUS_AUTOTUNE")], PARAM_SOURCE_HOROVOD);
    ck_assert_uint_eq(set.values.fusion_threshold, 1048576);
    ck_assert(set.values.cycle_time_ms == 3.5);
    ck_assert_uint_eq(set.values.cache_capacity, 7);
    ck_assert_str_eq(set.values.timeline, "/tmp/t.json");
    ck_assert(set.values.stall_warning_seconds == 5);
    ck_assert(set.values.stall_shutdown_seconds == 30);
    ck_assert_int_eq(set.values.log_level, 0);
    ck_assert_int_eq(set.sources[param_index("CHORUS_FUSION_THRESHOLD")], PARAM_SOURCE_HOROVOD);
    ck_assert_str_eq(set.unknown_variables, "");
    for (size_t i = 0; i < param_count; i++)
        if (strcmp(param_table[i].name, "CHORUS_CACHE_CAPACITY") == 0)
            ck_assert_int_eq(set.sources[i], PARAM_SOURCE_ENVIRONMENT);
    char *malformed[] = {"HOROVOD_CYCLE_TIME=soon", NULL};
    ck_assert_int_eq(load(malformed, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_ptr_nonnull(strstr(error, "HOROVOD_CYCLE_TIME"));
    ck_assert_ptr_nonnull(strstr(error, "CHORUS_CYCLE_TIME_MS"));
}
END_TEST

START_TEST(options_override_environment)
{
    char *environment[] = {"CHORUS_FUSION_THRESHOLD=64M", NULL};
    ck_assert_int_eq(load(environment, "CHORUS_FUSION_THRESHOLD=1K;CHORUS_CACHE_CAPACITY=5"),
                     CHORUS_OK);
    ck_assert_uint_eq(set.values.fusion_threshold, 1024);
    ck_assert_uint_eq(set.values.cache_capacity, 5);
    ck_assert_int_eq(set.sources[param_index("CHORUS_FUSION_THRESHOLD")], PARAM_SOURCE_OPTIONS);
}
END_TEST

START_TEST(malformed_values_name_variable_and_value)
{
    char *bad_bytes[] = {"CHORUS_FUSION_THRESHOLD=12 apples", NULL};
    ck_assert_int_eq(load(bad_bytes, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_ptr_nonnull(strstr(error, "CHORUS_FUSION_THRESHOLD"));
    ck_assert_ptr_nonnull(strstr(error, "\"12 apples\""));

    char *bad_seconds[] = {"CHORUS_STALL_WARNING_SECONDS=-3", NULL};
    ck_assert_int_eq(load(bad_seconds, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_ptr_nonnull(strstr(error, "CHORUS_STALL_WARNING_SECONDS"));

    char *bad_level[] = {"CHORUS_LOG_LEVEL=loud", NULL};
    ck_assert_int_eq(load(bad_level, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_ptr_nonnull(strstr(error, "\"loud\""));

    char *bad_stores[] = {"CHORUS_STAGING_STORES=fast", NULL};
    ck_assert_int_eq(load(bad_stores, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_msg(strstr(error, "CHORUS_STAGING_STORES") && strstr(error, "\"fast\"") &&
                      strstr(error, "streaming"),
                  "names the variable, the value and the valid ones: %s", error);

    char *bad_algorithm[] = {"CHORUS_ALLREDUCE_ALGO=fastest", NULL};
    ck_assert_int_eq(load(bad_algorithm, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_ptr_nonnull(strstr(error, "\"fastest\""));
    ck_assert_msg(strstr(error, "ring") && strstr(error, "rabenseifner"),
                  "the valid names are listed: %s", error);

    char *fine[] = {NULL};
    ck_assert_int_eq(load(fine, "CHORUS_NOPE=1"), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_ptr_nonnull(strstr(error, "CHORUS_NOPE"));
    ck_assert_int_eq(load(fine, "CHORUS_CACHE_CAPACITY=lots"), CHORUS_ERR_BAD_PARAMETER);

    /* Values that parse but are not allowed fail too, instead of being rounded or overflowing
     * a size computation later. */
    char *three_areas[] = {"CHORUS_STAGING_AREAS=3", NULL};
    ck_assert_int_eq(load(three_areas, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_msg(strstr(error, "CHORUS_STAGING_AREAS") && strstr(error, "16"), "%s", error);
    char *four_areas[] = {"CHORUS_STAGING_AREAS=4", NULL};
    ck_assert_int_eq(load(four_areas, NULL), CHORUS_OK);
    /* Chunks: a power of two from 4K to 256M, or 0 for the default. */
    const char *bad_chunks[] = {"CHORUS_SEGMENT_CHUNK=3000", "CHORUS_SEGMENT_CHUNK=2K",
                                "CHORUS_CROSS_HOST_CHUNK=512M", "CHORUS_CROSS_HOST_CHUNK=lots"};
    for (size_t i = 0; i < sizeof bad_chunks / sizeof *bad_chunks; i++) {
        char *chunk[] = {(char *)bad_chunks[i], NULL};
        ck_assert_int_eq(load(chunk, NULL), CHORUS_ERR_BAD_PARAMETER);
        ck_assert_msg(strstr(error, "power of two from 4K to 256M"), "%s", error);
    }
    char *good_chunks[] = {"CHORUS_SEGMENT_CHUNK=256K", "CHORUS_CROSS_HOST_CHUNK=16M", NULL};
    ck_assert_int_eq(load(good_chunks, NULL), CHORUS_OK);
    /* The lanes' slots: every rank holds two, so at most 1M. */
    char *huge_slot[] = {"CHORUS_SMALL_LIMIT=2M", NULL};
    ck_assert_int_eq(load(huge_slot, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_msg(strstr(error, "CHORUS_SMALL_LIMIT") && strstr(error, "from 0 to 1M"), "%s",
                  error);
    char *slots[] = {"CHORUS_SMALL_LIMIT=1M", NULL};
    ck_assert_int_eq(load(slots, NULL), CHORUS_OK);
    ck_assert_uint_eq(set.values.small_limit, (size_t)1 << 20);
    char *no_slots[] = {"CHORUS_SMALL_LIMIT=0", NULL};
    ck_assert_int_eq(load(no_slots, NULL), CHORUS_OK);
    ck_assert_uint_eq(set.values.small_limit, 0);
    /* The compressions by name, and quantization's rounding. */
    char *quantized[] = {"CHORUS_COMPRESSION=INT4", "CHORUS_COMPRESSION_ROUNDING=stochastic",
                         "CHORUS_COMPRESSION_SEED=42", NULL};
    ck_assert_int_eq(load(quantized, NULL), CHORUS_OK);
    ck_assert_int_eq(set.values.compression, CHORUS_COMPRESSION_INT4);
    ck_assert_int_eq(set.values.compression_rounding, 1);
    ck_assert_uint_eq(set.values.compression_seed, 42);
    char *bad_compression[] = {"CHORUS_COMPRESSION=int2", NULL};
    ck_assert_int_eq(load(bad_compression, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_msg(strstr(error, "\"int2\"") && strstr(error, "int4 or topk"), "%s", error);
    /* Top-k's ratio: a fraction above 0, at most 1. */
    char *topk[] = {"CHORUS_COMPRESSION=topk", "CHORUS_COMPRESSION_TOPK_RATIO=0.125", NULL};
    ck_assert_int_eq(load(topk, NULL), CHORUS_OK);
    ck_assert_int_eq(set.values.compression, CHORUS_COMPRESSION_TOPK);
    ck_assert(set.values.compression_topk_ratio == 0.125);
    const char *bad_ratios[] = {"0", "1.5", "-0.1", "nan", "half"};
    for (size_t i = 0; i < sizeof bad_ratios / sizeof bad_ratios[0]; i++) {
        char setting[64];
        snprintf(setting, sizeof setting, "CHORUS_COMPRESSION_TOPK_RATIO=%s", bad_ratios[i]);
        char *bad_ratio[] = {setting, NULL};
        ck_assert_int_eq(load(bad_ratio, NULL), CHORUS_ERR_BAD_PARAMETER);
        ck_assert_msg(strstr(error, "CHORUS_COMPRESSION_TOPK_RATIO") &&
                          strstr(error, bad_ratios[i]) && strstr(error, "at most 1"),
                      "%s", error);
    }
    char *bad_rounding[] = {"CHORUS_COMPRESSION_ROUNDING=up", NULL};
    ck_assert_int_eq(load(bad_rounding, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_msg(strstr(error, "CHORUS_COMPRESSION_ROUNDING") && strstr(error, "stochastic"),
                  "%s", error);
    char *huge_cache[] = {"CHORUS_CACHE_CAPACITY=18446744073709551615", NULL};
    ck_assert_int_eq(load(huge_cache, NULL), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_ptr_nonnull(strstr(error, "CHORUS_CACHE_CAPACITY"));

    /* An over-long setting in the options names its variable. */
    char long_setting[2048] = "CHORUS_TIMELINE=";
    memset(long_setting + strlen(long_setting), 'x', 1500);
    ck_assert_int_eq(load(fine, long_setting), CHORUS_ERR_BAD_PARAMETER);
    ck_assert_msg(strstr(error, "CHORUS_TIMELINE") != NULL, "%s", error);
}
END_TEST

START_TEST(rank0_values_replace_wire_shaping_ones_only)
{
    char *environment[] = {"CHORUS_LOG_LEVEL=error", NULL};
    ck_assert_int_eq(load(environment, NULL), CHORUS_OK);
    struct chorus_params rank0 = set.values;
    rank0.fusion_threshold = 4096;
    rank0.log_level = 4;
    ck_assert_uint_eq(params_adopt_rank0(&set, &rank0), 1);
    ck_assert_uint_eq(set.values.fusion_threshold, 4096);
    ck_assert_int_eq(set.values.log_level, 0);
    ck_assert_int_eq(set.sources[param_index("CHORUS_FUSION_THRESHOLD")], PARAM_SOURCE_RANK0);
}
END_TEST

/* The wire form of the values rank 0 sends: every wire-shaping value comes back with the same
 * bits (seconds too), the others stay this rank's; a foreign or damaged form is refused, naming
 * what is wrong. */
START_TEST(wire_form_round_trips_and_refuses_foreign_forms)
{
    char *environment[] = {"CHORUS_FUSION_THRESHOLD=3M", "CHORUS_TIMEOUT_SECONDS=7.123456789012",
                           "CHORUS_CYCLE_TIME_MS=0.1", "CHORUS_NEGOTIATION=star",
                           "CHORUS_ALLREDUCE_ALGO=ring", "CHORUS_LOG_LEVEL=trace", NULL};
    ck_assert_int_eq(load(environment, NULL), CHORUS_OK);
    struct chorus_params rank0 = set.values;
    char wire[16384];
    size_t length = params_encode_wire(&rank0, wire, sizeof wire);
    ck_assert_uint_le(length, sizeof wire);
    ck_assert_uint_eq(params_encode_wire(&rank0, NULL, 0), length);
    char *defaults[] = {NULL};
    ck_assert_int_eq(load(defaults, NULL), CHORUS_OK);
    struct chorus_params here = set.values;
    char why[512] = "";
    ck_assert_msg(params_decode_wire(wire, length, &here, why, sizeof why), "%s", why);
    for (size_t i = 0; i < param_count; i++) {
        char mine[PARAM_TEXT_LENGTH], theirs[PARAM_TEXT_LENGTH];
        params_format_value(&here, i, mine, sizeof mine);
        params_format_value(param_table[i].flags & PARAM_SHAPES_WIRE ? &rank0 : &set.values, i,
                            theirs, sizeof theirs);
        ck_assert_msg(strcmp(mine, theirs) == 0, "%s: %s, expected %s", param_table[i].name,
                      mine, theirs);
    }
    ck_assert(here.timeout_seconds == rank0.timeout_seconds);
    ck_assert(here.cycle_time_ms == rank0.cycle_time_ms);
    ck_assert_int_eq(here.log_level, set.values.log_level); /* not a wire parameter */

    /* A parameter this build lacks, one it does not take from rank 0, one missing, an entry
     * without '=' or without its end, and a value that does not parse. */
    const struct {
        const char *form;
        size_t extra;
        const char *named;
    } foreign[] = {
        {"CHORUS_FROM_THE_FUTURE=1", 1, "CHORUS_FROM_THE_FUTURE, which this build does not have"},
        {"CHORUS_LOG_LEVEL=info", 1, "does not take from rank 0"},
        {"CHORUS_FUSION_THRESHOLD", 1, "without '='"},
        {"CHORUS_FUSION_THRESHOLD=1M", 0, "without '='"},
        {"CHORUS_FUSION_THRESHOLD=lots", 1, "CHORUS_FUSION_THRESHOLD=lots does not parse"},
    };
    for (size_t f = 0; f < sizeof foreign / sizeof foreign[0]; f++) {
        char damaged[16384 + 256];
        memcpy(damaged, wire, length);
        size_t added = strlen(foreign[f].form) + foreign[f].extra;
        memcpy(damaged + length, foreign[f].form, added); /* extra: its '\0' */
        here = set.values;
        ck_assert(!params_decode_wire(damaged, length + added, &here, why, sizeof why));
        ck_assert_msg(strstr(why, foreign[f].named) != NULL, "%s: %s", foreign[f].form, why);
    }
    /* The first entry (a wire parameter) left out. */
    size_t first = strlen(wire) + 1;
    ck_assert(!params_decode_wire(wire + first, length - first, &here, why, sizeof why));
    ck_assert_msg(strstr(why, "rank 0 does not send parameter") != NULL, "%s", why);
}
END_TEST

/* What a row allows is consistent: a tuning file's settings and autotune's changes shape the
 * wire (every rank must make the same fusion plans), what autotune changes is a running number
 * with PARAM_RUNTIME, and what chorus-tune measures is settable by the file it writes, each
 * value parsing as the parameter's. */
START_TEST(rows_say_consistently_who_may_set_them)
{
    size_t tuning_file = 0, runtime = 0;
    for (size_t i = 0; i < param_count; i++) {
        const struct param_definition *row = &param_table[i];
        if (row->flags & PARAM_TUNING_FILE) {
            tuning_file++;
            ck_assert_msg(row->flags & PARAM_SHAPES_WIRE, "%s", row->name);
        }
        if (row->flags & PARAM_RUNTIME) {
            runtime++;
            ck_assert_msg(row->flags & PARAM_SHAPES_WIRE, "%s", row->name);
        }
        if (row->autotune_candidates != NULL) {
            ck_assert_msg(row->flags & PARAM_RUNTIME, "%s", row->name);
            struct chorus_params values;
            ck_assert_msg(params_store_number(&values, i, row->autotune_candidates[0]), "%s",
                          row->name);
            ck_assert(params_number(&values, i) == row->autotune_candidates[0]);
        }
        if (row->tune_values != NULL) {
            ck_assert_msg(row->flags & PARAM_TUNING_FILE, "%s", row->name);
            ck_assert_int_ne(row->tune_measure, PARAM_MEASURE_NONE);
            ck_assert_str_eq(row->tune_values[0], "");
            for (size_t v = 1; row->tune_values[v] != NULL; v++) {
                struct chorus_params values;
                char why[256];
                ck_assert_msg(v < PARAM_TUNE_VALUES, "%s", row->name);
                ck_assert_msg(params_store_text(&values, (int)i, row->tune_values[v], why,
                                                sizeof why),
                              "%s=%s: %s", row->name, row->tune_values[v], why);
            }
        }
    }
    /* the parameters of each kind when this test was written: a row that loses its mark fails */
    ck_assert_uint_eq(tuning_file, 7);
    ck_assert_uint_eq(runtime, 3);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("params");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, defaults_when_nothing_is_set);
    tcase_add_test(tc, byte_suffixes);
    tcase_add_test(tc, environment_values_and_sources);
    tcase_add_test(tc, options_override_environment);
    tcase_add_test(tc, malformed_values_name_variable_and_value);
    tcase_add_test(tc, rank0_values_replace_wire_shaping_ones_only);
    tcase_add_test(tc, horovod_variables_are_aliases);
    tcase_add_test(tc, rows_say_consistently_who_may_set_them);
    tcase_add_test(tc, wire_form_round_trips_and_refuses_foreign_forms);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
