/* The open-file and chunk-cache plan of chunked HDF5 reads (hdf5.h): how
 * many files the catalog's readers hold open and how much chunk cache each
 * gets, from prefetch.format_memory and the chunk geometry the scan found.
 *
 * A chunk spanning R rows is needed by R samples; in shuffled order they
 * come at any time of the epoch, so a chunk is inflated (and its bytes read)
 * once per epoch only if it stays cached all epoch: every file open, each
 * with a cache of all its chunks. When the budget holds that, that is the
 * plan. When not, each open file still gets a cache of all its chunks (a
 * smaller one thrashes within the file), as many files as the budget holds,
 * and the expected cost is said: with a fraction f of the chunks cached, a
 * chunk is loaded 1 + (R - 1)(1 - f) times. Chunks of one row at most need
 * no cache: as many files as the budget holds are open (a file opened again
 * reads its metadata again). An open file also costs HDF5's own structures
 * (file_cost: its metadata cache's index alone is 512 KiB), counted too.
 *
 * Pure: any thread. */
#include "hdf5.h"

#include "../common/base.h"

void hdf5_plan_make(const struct hdf5_plan_in *in, struct hdf5_plan *out)
{
	uint32_t cap = MAX(MIN(in->files, in->open_cap), 1u);
	uint64_t cost = in->file_cost;
	*out = (struct hdf5_plan){ .open = cap, .cache = 0, .rereads = false, .amp = 1.0 };
	if (in->max_rows <= 1 || in->total_need == 0) {
		if (cost)
			out->open = (uint32_t)MAX(MIN(in->budget / cost, (uint64_t)cap), 1);
		return;
	}
	if (in->total_need + (uint64_t)in->files * cost <= in->budget && in->files <= in->open_cap) {
		out->cache = in->max_need;
		return;
	}
	out->cache = in->budget > cost ? MIN(in->max_need, in->budget - cost) : 0;
	uint64_t unit = out->cache + cost;
	out->open = unit ? (uint32_t)MAX(MIN(in->budget / unit, (uint64_t)cap), 1) : cap;
	double held = (double)out->open * (double)out->cache;
	double f = MIN(held / (double)in->total_need, (double)out->open / (double)in->files);
	f = MIN(f, 1.0);
	out->rereads = true;
	out->amp = 1.0 + (double)(in->max_rows - 1) * (1.0 - f);
}
