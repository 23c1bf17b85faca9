/*
 * The zinstall USDT provider.
 *
 * Compiled into the copier library by its build script (usdt crate);
 * visible to dtrace(8) on illumos as zinstall<pid>:::, and to bpftrace on
 * Linux as usdt:/path/to/zinstall:zinstall:*. With no tracer attached a
 * probe is a NOP and its arguments are not computed.
 *
 * Durations are measured in the program and passed in nanoseconds, so
 * scripts need no state to report them.
 */
provider zinstall {
	/* A copy run starts: source, destination. */
	probe walk__start(char *, char *);
	/* It ends: entries done, errors, nanoseconds. */
	probe walk__done(uint64_t, uint64_t, uint64_t);
	/* A walker queued a batch: walker, jobs in it, batches already
	 * queued. */
	probe batch__dispatch(uint32_t, uint64_t, uint64_t);
	/* A walker starts reading a directory: walker, source path. */
	probe dir__start(uint32_t, char *);
	/* It has read it: walker, source path, entries, errno (as
	 * job-done). */
	probe dir__done(uint32_t, char *, uint64_t, int32_t);
	/* A walker found no directory to read and waits: walker. */
	probe walker__idle(uint32_t);
	/* A job starts: worker, kind (file, symlink, special, redirect),
	 * source path. */
	probe job__start(uint32_t, char *, char *);
	/* A job ends: worker, kind, source path, bytes copied, errno (0 on
	 * success, -1 for an error that is not a system call's). */
	probe job__done(uint32_t, char *, char *, uint64_t, int32_t);
	/* A worker waits for a batch: worker. */
	probe worker__idle(uint32_t);
	/* A worker took a batch: worker, jobs in it, nanoseconds it waited. */
	probe worker__busy(uint32_t, uint64_t, uint64_t);
	/* An archive entry starts: archive, entry name. */
	probe archive__entry__start(char *, char *);
	/* It ends: archive, entry name, bytes, errno (as job-done). */
	probe archive__entry__done(char *, char *, uint64_t, int32_t);
	/* An install step starts: zone or zonepath, step. */
	probe step__start(char *, char *);
	/* It ends: zone or zonepath, step, nanoseconds, 0 or 1 if it failed. */
	probe step__done(char *, char *, uint64_t, int32_t);
};
