/* config_int.h - the key table shared by config.c (parsing, dumps) and
 * config_keys.c (the table itself). Private to the files of src/config/. */
#ifndef SEER_CONFIG_INT_H
#define SEER_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum config_type { CFG_STR, CFG_U64, CFG_SIZE, CFG_BOOL, CFG_DOUBLE, CFG_ENUM, CFG_LOGLEVEL };

struct config_key {
	const char *section;
	const char *name;
	enum config_type type;
	size_t off;
	const char *def;
	uint64_t min, max;        /* numbers and sizes */
	const char *const *choices; /* CFG_ENUM */
	bool job;                 /* all nodes of a job must agree */
	const char *help;
};

extern const struct config_key config_keys[];
extern const size_t config_nkeys;

#endif
