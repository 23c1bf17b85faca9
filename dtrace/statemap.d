#!/usr/sbin/dtrace -Cs
/*
 * statemap.d: the threads of a command as a statemap, on illumos.
 *
 * UNTESTED: DTrace does not run on the machines that build and test
 * zinstall; this script is kept in step with dtrace/statemap.bt (the
 * same states, colours, emissions and entity names) by reading, and its
 * declarations are checked against that script's by the tests.
 *
 * USAGE
 *	dtrace -Cs dtrace/statemap.d -c 'zinstall copy SRC DST' -o raw.json
 *	zinstall trace --tidy raw.json -o copy.statemap.json
 *	zinstall statemap copy.statemap.json
 *
 *	dtrace -c starts the command once every probe is enabled, so
 *	nothing of it is missed, and stops when it exits. (-p PID attaches
 *	to a running process instead, seeing it only from then on.) The
 *	raw output holds one JSON object per line, entities are LWP ids and
 *	each thread's name comes in "name" events; zinstall trace --tidy
 *	sorts it by time, moves any line that is not a JSON object to
 *	standard error, and names each entity after its thread (its
 *	t_name, or the program's name for an unnamed thread), exactly as
 *	for dtrace/statemap.bt: each walker (walk-N) and each worker
 *	(copy-N) is a row of its own.
 *
 * STATES (one row per thread)
 *	on-cpu			running in user mode
 *	on-cpu-syscall		running in the kernel, in a system call
 *	off-cpu-runnable	not running but ready to: preempted (TS_RUN),
 *				or new and not yet run
 *	off-cpu-waiting		sleeping where a signal could wake it
 *				(waiting for work, a condition variable)
 *	off-cpu-blocked		sleeping where no signal can wake it
 *				(metadata I/O, filesystem locks)
 *	off-cpu-io-read		sleeping inside read, pread, readv or getdents
 *	off-cpu-io-write	sleeping inside write, pwrite, writev, fsync or
 *				fdatasync
 *	off-cpu-dead		the thread has exited
 *
 *	The colours are those of dtrace/statemap.bt and zinstall's own
 *	recorder: the Okabe-Ito palette, told apart with any colour vision.
 *
 *	Events: "wakeup" (entity: the waker, target: the thread woken) when
 *	the thread woken is the command's, and "thread-create".
 *
 * HOW LITTLE IT EMITS
 *	As in dtrace/statemap.bt: time on CPU is summed per thread, and one
 *	record says, when a thread leaves the CPU (or every millisecond it
 *	stays on it, at the next system call's return), when that stretch
 *	began, how much of it was spent in system calls and why it ended.
 *	Each stretch is drawn as on-cpu then on-cpu-syscall with their true
 *	totals, then the off-CPU state.
 *
 * CONSIDERATIONS
 *	- A thread leaving the CPU still runnable (t_state TS_RUN) is
 *	  off-cpu-runnable; otherwise T_WAKEABLE tells waiting from
 *	  blocked, as the statemap contrib scripts do.
 *	- The main thread is off-cpu-waiting from time zero until it first
 *	  runs, and a new thread off-cpu-runnable from its creation until
 *	  it first runs.
 */

#pragma D option quiet
#pragma D option destructive
#pragma D option bufsize=16m
#pragma D option switchrate=100hz
#pragma D option dynvarsize=16m

typedef enum {
	STATE_ON_CPU = 0,
	STATE_ON_CPU_SYSCALL,
	STATE_OFF_CPU_RUNNABLE,
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
#define TS_RUN		0x02

BEGIN
{
	wall = walltimestamp;
	printf("{\n\t\"start\": [ %d, %d ],\n",
	    wall / 1000000000, wall % 1000000000);
	printf("\t\"title\": \"threads of pid %d\",\n", $target);
	printf("\t\"host\": \"%s\",\n", `utsname.nodename);
	printf("\t\"entityKind\": \"Thread\",\n");
	printf("\t\"states\": {\n");
	STATE_METADATA(STATE_ON_CPU, "on-cpu", "#E69F00")
	STATE_METADATA(STATE_ON_CPU_SYSCALL, "on-cpu-syscall", "#0072B2")
	STATE_METADATA(STATE_OFF_CPU_RUNNABLE, "off-cpu-runnable", "#CC79A7")
	STATE_METADATA(STATE_OFF_CPU_WAITING, "off-cpu-waiting", "#EEEEEE")
	STATE_METADATA(STATE_OFF_CPU_BLOCKED, "off-cpu-blocked", "#D55E00")
	STATE_METADATA(STATE_OFF_CPU_IO_READ, "off-cpu-io-read", "#56B4E9")
	STATE_METADATA(STATE_OFF_CPU_IO_WRITE, "off-cpu-io-write", "#009E73")
	STATE_METADATA(STATE_OFF_CPU_DEAD, "off-cpu-dead", "#999999")
	printf("\t}\n}\n");
	start = timestamp;
	/* The command's main thread (LWP 1) waits for dtrace to run it. */
	printf("{ \"time\": \"0\", \"entity\": \"1\", \"state\": %d }\n",
	    STATE_OFF_CPU_WAITING);
}

syscall:::entry
/pid == $target && !self->on/
{
	/* First seen here: its stretch on CPU starts now. */
	self->on = timestamp;
}

syscall:::entry
/pid == $target/
{
	self->insys = 1;
	self->sysin = timestamp;
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
/pid == $target && self->sysin/
{
	self->sys += timestamp - self->sysin;
	self->sysin = 0;
}

syscall:::return
/pid == $target/
{
	self->insys = 0;
	self->io = 0;
}

syscall:::return
/pid == $target && self->on && timestamp - self->on >= 1000000/
{
	/* A millisecond on CPU: say how it was spent, start anew. */
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    self->on - start, tid, STATE_ON_CPU);
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    timestamp - self->sys - start, tid, STATE_ON_CPU_SYSCALL);
	self->on = timestamp;
	self->sys = 0;
}

sched:::off-cpu
/pid == $target && !self->dead && self->sysin/
{
	self->sys += timestamp - self->sysin;
	self->sysin = 0;
}

sched:::off-cpu
/pid == $target && !self->dead/
{
	/* One of ours leaves the CPU: its stretch on it, and why it left. */
	self->t0 = self->on ? self->on : timestamp;
	self->now = timestamp;
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    self->t0 - start, tid, STATE_ON_CPU);
}

sched:::off-cpu
/pid == $target && !self->dead && self->sys/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    self->now - self->sys - start, tid, STATE_ON_CPU_SYSCALL);
}

sched:::off-cpu
/pid == $target && !self->dead/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    self->now - start, tid,
	    curthread->t_state == TS_RUN ? STATE_OFF_CPU_RUNNABLE :
	    self->io ? self->io :
	    (curthread->t_flag & T_WAKEABLE) ? STATE_OFF_CPU_WAITING :
	    STATE_OFF_CPU_BLOCKED);
	self->on = 0;
	self->sys = 0;
}

sched:::off-cpu
/pid == $target && !self->dead && !self->named/
{
	self->named = 1;
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", ", self->now - start,
	    tid);
	printf("\"event\": \"name\", \"target\": \"%s\" }\n",
	    curthread->t_name != NULL ? stringof(curthread->t_name) : execname);
}

sched:::on-cpu
/pid == $target/
{
	/* One of ours comes onto the CPU: a stretch starts. */
	self->on = timestamp;
}

sched:::on-cpu
/pid == $target && self->insys/
{
	self->sysin = timestamp;
}

sched:::wakeup
/args[1]->pr_pid == $target/
{
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", ", timestamp - start,
	    tid);
	printf("\"event\": \"wakeup\", \"target\": \"%d\" }\n",
	    args[0]->pr_lwpid);
}

proc:::lwp-create
/pid == $target/
{
	/* A new thread is runnable until the scheduler first runs it. */
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", ", timestamp - start,
	    tid);
	printf("\"event\": \"thread-create\", \"target\": \"%d\" }\n",
	    args[0]->pr_lwpid);
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    timestamp - start, args[0]->pr_lwpid, STATE_OFF_CPU_RUNNABLE);
}

proc:::lwp-exit, proc:::exit
/pid == $target && !self->dead && self->sysin/
{
	self->sys += timestamp - self->sysin;
	self->sysin = 0;
}

proc:::lwp-exit, proc:::exit
/pid == $target && !self->dead/
{
	/* The last stretch on CPU, then dead; and the name it died with. */
	self->dead = 1;
	self->now = timestamp;
	self->t0 = self->on ? self->on : self->now;
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    self->t0 - start, tid, STATE_ON_CPU);
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    self->now - self->sys - start, tid, STATE_ON_CPU_SYSCALL);
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", \"state\": %d }\n",
	    self->now - start, tid, STATE_OFF_CPU_DEAD);
	printf("{ \"time\": \"%d\", \"entity\": \"%d\", ", self->now - start,
	    tid);
	printf("\"event\": \"name\", \"target\": \"%s\" }\n",
	    curthread->t_name != NULL ? stringof(curthread->t_name) : execname);
}
