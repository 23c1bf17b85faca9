#!/usr/sbin/dtrace -Cs
/*
 * statemap.d: the threads of a running zinstall process as a statemap,
 * on illumos.
 *
 * USAGE
 *	dtrace -Cs dtrace/statemap.d -p PID > zinstall.statemap.json
 *	dtrace -Cs dtrace/statemap.d -c 'zinstall copy SRC DST' > out.json
 *	zinstall statemap out.json -o out.svg
 *
 *	Tracing stops when the process exits, on ^C, or after 10 minutes.
 *	The output is the statemap format: a metadata object, then one JSON
 *	object per line. For what each thread was working on, watch the
 *	zinstall provider's job-start and job-done probes (dtrace/zinstall.d)
 *	alongside.
 *
 * STATES (one row per thread; the entity is the LWP id)
 *	on-cpu			running in user mode
 *	on-cpu-syscall		running in the kernel, in a system call
 *	off-cpu-waiting		sleeping where a signal could wake it
 *				(waiting for work, a condition variable)
 *	off-cpu-blocked		sleeping where no signal can wake it
 *				(metadata I/O, filesystem locks)
 *	off-cpu-io-read		off CPU inside read, pread, readv or getdents
 *	off-cpu-io-write	off CPU inside write, pwrite, writev, fsync or
 *				fdatasync
 *	off-cpu-dead		the thread has exited
 *
 *	Events: "wakeup" (entity: the waker, target: the thread woken) and
 *	"thread-create".
 *
 * CONSIDERATIONS
 *	- The same states, in the same order, as dtrace/statemap.bt, so
 *	  maps from both systems compare row for row.
 *	- T_WAKEABLE tells waiting from blocked, as the statemap contrib
 *	  scripts do; a thread preempted while runnable shows as on-cpu
 *	  until it next sleeps.
 *	- Each transition costs a printf; trace short runs.
 */

#pragma D option quiet
#pragma D option destructive
#pragma D option bufsize=16m
#pragma D option switchrate=100hz

typedef enum {
	STATE_ON_CPU = 0,
	STATE_ON_CPU_SYSCALL,
	STATE_OFF_CPU_WAITING,
	STATE_OFF_CPU_BLOCKED,
	STATE_OFF_CPU_IO_READ,
	STATE_OFF_CPU_IO_WRITE,
	STATE_OFF_CPU_DEAD,
	STATE_MAX
} state_t;

#define STATE_METADATA(_state, _str, _color) \
	printf("\t\t\"%s\": {\"value\": %d, \"color\": \"%s\" }%s\n", \
	    _str, _state, _color, _state < STATE_MAX - 1 ? "," : "");

#define T_WAKEABLE	0x0002

BEGIN
{
	wall = walltimestamp;
	printf("{\n\t\"start\": [ %d, %d ],\n",
	    wall / 1000000000, wall % 1000000000);
	printf("\t\"title\": \"threads of pid %d\",\n", $target);
	printf("\t\"host\": \"%s\",\n", `utsname.nodename);
	printf("\t\"entityKind\": \"Thread\",\n");
	printf("\t\"states\": {\n");
	STATE_METADATA(STATE_ON_CPU, "on-cpu", "#DAA520")
	STATE_METADATA(STATE_ON_CPU_SYSCALL, "on-cpu-syscall", "#E8A33B")
	STATE_METADATA(STATE_OFF_CPU_WAITING, "off-cpu-waiting", "#f9f9f9")
	STATE_METADATA(STATE_OFF_CPU_BLOCKED, "off-cpu-blocked", "#C62B32")
	STATE_METADATA(STATE_OFF_CPU_IO_READ, "off-cpu-io-read", "#FFC0CB")
	STATE_METADATA(STATE_OFF_CPU_IO_WRITE, "off-cpu-io-write", "#2E8B57")
	STATE_METADATA(STATE_OFF_CPU_DEAD, "off-cpu-dead", "#E0E0E0")
	printf("\t}\n}\n");
	start = timestamp;
}

syscall:::entry
/pid == $target/
{
	self->insys = 1;
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    timestamp - start, tid, STATE_ON_CPU_SYSCALL);
}

syscall::read:entry, syscall::pread:entry, syscall::readv:entry,
syscall::getdents:entry
/pid == $target/
{
	self->io = STATE_OFF_CPU_IO_READ;
}

syscall::write:entry, syscall::pwrite:entry, syscall::writev:entry,
syscall::fdsync:entry
/pid == $target/
{
	self->io = STATE_OFF_CPU_IO_WRITE;
}

syscall:::return
/pid == $target/
{
	self->insys = 0;
	self->io = 0;
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    timestamp - start, tid, STATE_ON_CPU);
}

sched:::off-cpu
/pid == $target/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    timestamp - start, tid,
	    self->io ? self->io :
	    (curthread->t_flag & T_WAKEABLE) ? STATE_OFF_CPU_WAITING :
	    STATE_OFF_CPU_BLOCKED);
}

sched:::on-cpu
/pid == $target/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    timestamp - start, tid,
	    self->insys ? STATE_ON_CPU_SYSCALL : STATE_ON_CPU);
}

sched:::wakeup
/pid == $target || args[1]->pr_pid == $target/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", ", timestamp - start,
	    tid);
	printf("\"event\": \"wakeup\", \"target\": \"%d\" }\n",
	    args[0]->pr_lwpid);
}

proc:::lwp-create
/pid == $target/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", ", timestamp - start,
	    tid);
	printf("\"event\": \"thread-create\", \"target\": \"%d\" }\n",
	    args[0]->pr_lwpid);
}

proc:::lwp-exit, proc:::exit
/pid == $target/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    timestamp - start, tid, STATE_OFF_CPU_DEAD);
}

tick-600sec
{
	exit(0);
}
