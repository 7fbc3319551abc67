/*
 * gradient_list.c — finding a model's list of gradient sizes (measure.h).
 */
#include "measure.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

FILE *measure_gradient_list_open(const char *workload, char *path, size_t path_size)
{
    FILE *file = fopen(workload, "r");
    if (file != NULL) {
        snprintf(path, path_size, "%s", workload);
        return file;
    }
    char program[768] = "", beside_build[1024] = "", beside_tool[1024] = "";
    ssize_t length = readlink("/proc/self/exe", program, sizeof program - 1);
    if (length > 0) {
        program[length] = '\0';
        char *slash = strrchr(program, '/');
        if (slash != NULL)
            *slash = '\0';
        snprintf(beside_build, sizeof beside_build, "%s/../../../shared/data", program);
        snprintf(beside_tool, sizeof beside_tool, "%s/../../../../shared/data", program);
    }
    const char *directories[] = {getenv("CHORUS_DATA_DIR"), "shared/data", "../shared/data",
                                 beside_build, beside_tool};
    const char *file_name = strcmp(workload, "bert") == 0 ? "bert_base_grads.txt"
                                                           : "resnet50_grads.txt";
    for (size_t i = 0; i < sizeof directories / sizeof directories[0]; i++) {
        if (directories[i] == NULL || directories[i][0] == '\0')
            continue;
        snprintf(path, path_size, "%s/%s", directories[i], file_name);
        if ((file = fopen(path, "r")) != NULL)
            return file;
    }
    return NULL;
}

