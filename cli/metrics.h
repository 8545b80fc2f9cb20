/*
 * metrics.h - Prometheus metrics of a checkpoint loop (crest checkpoint
 * --every, crest run --every): served over HTTP at GET /metrics
 * (--metrics ADDR) and/or written as a node_exporter textfile after every
 * round (--metrics-file PATH), in the text exposition format 0.0.4.
 *
 * The server is one thread with poll(): non-blocking sockets, a bounded
 * request, a deadline per connection, 404 for any other path. The loop
 * only ever takes a mutex to copy a few numbers in; a slow or hostile
 * client can cost the scrape, never a checkpoint.
 */
#ifndef CREST_CLI_METRICS_H
#define CREST_CLI_METRICS_H

#include <stdint.h>
#include <sys/types.h>

#include "capture/transparent.h"
#include "cli/common.h"

struct cli_metrics;

/* Checks and takes what the options name, before anything starts: binds
 * addr (PORT, HOST:PORT, [V6]:PORT, :PORT; host 127.0.0.1 when none is
 * given: every interface only when named, 0.0.0.0:PORT or [::]:PORT;
 * port 0 for any free one), and opens
 * the directory of file, refusing a symlink anywhere on its path (crest
 * runs as root). Either may be NULL. 0, or -errno with a one-line message
 * naming the option; the caller exits 2. The listening socket is
 * close-on-exec, and pidns_spawn closes it in the job. */
int cli_metrics_open(const char *addr, const char *file, struct cli_metrics **out);

/* Labels every sample with branch and pid, says where the metrics are (a
 * line on stderr: "crest: metrics on http://HOST:PORT/metrics", or JSON
 * with --json; nothing with --quiet), writes the textfile once and starts
 * the server thread. Call it after pidns_spawn (which wants no threads).
 * 0, or -errno with a message. */
int cli_metrics_start(struct cli_metrics *m, const struct cli *c, const char *branch, pid_t pid,
		      uint64_t every_ns);

/* One round of the loop: rc 0 is a committed checkpoint with figures st,
 * anything else a failure. Measures the store's size and rewrites the
 * textfile (a failure to write it is a warning, never the loop's). */
void cli_metrics_round(struct cli_metrics *m, int rc, const struct tp_result *st);

/* Stops the server (it closes its sockets and ends at once) and frees m.
 * NULL is fine. */
void cli_metrics_close(struct cli_metrics *m);

/* The metrics as they are now, in the text format, into a malloc'd
 * string (*len bytes): for tests and the two outputs above. */
char *cli_metrics_format(struct cli_metrics *m, size_t *len);

#endif
