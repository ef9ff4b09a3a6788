import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

// CPU time of other processes, from Linux's /proc (the benchmark reports CPU per call).
const TICKS_PER_SECOND = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;

/** User + system CPU milliseconds a process has used so far (0 once it is gone). */
export function cpuMs(pid: number): number {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return 0;
  }
  // The command name may hold spaces and parentheses: fields are counted after the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1000) / TICKS_PER_SECOND;
}

/** CPU used by a set of processes between start() and stop(), summed over every such pair. */
export class CpuMeter {
  private before = new Map<number, number>();
  private readonly used = new Map<number, number>();

  constructor(private readonly pids: readonly number[]) {}

  start(): void {
    this.before = new Map(this.pids.map((pid) => [pid, cpuMs(pid)]));
  }

  stop(): void {
    for (const pid of this.pids) {
      this.used.set(pid, (this.used.get(pid) ?? 0) + cpuMs(pid) - (this.before.get(pid) ?? 0));
    }
  }

  /** Milliseconds used by these processes (all of them if none are named). */
  ms(...pids: number[]): number {
    let sum = 0;
    for (const pid of pids.length > 0 ? pids : this.pids) sum += this.used.get(pid) ?? 0;
    return sum;
  }
}

/** The direct children of `pid`, with their command lines. */
export function childrenOf(pid: number): { pid: number; cmdline: string }[] {
  const found: { pid: number; cmdline: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid !== pid) continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ");
      found.push({ pid: Number(entry), cmdline });
    } catch {
      // Gone between the listing and the read.
    }
  }
  return found;
}
