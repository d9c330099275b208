// Drives `ratewindow-faultproxy` (tests/faultproxy) from the Node tests.
//
// The proxy is a small Rust binary that forwards TCP from a port of its own to a real server and puts
// faults in between on command. This module builds nothing: scripts/test-node.sh runs
// `cargo build --release -p ratewindow-faultproxy` first, and RATEWINDOW_FAULTPROXY may name another
// binary.
//
//   const proxy = await FaultProxy.start('127.0.0.1', 6379)
//   const client = new Redis({ host: proxy.host, port: proxy.port })
//   await proxy.latency(300)   // every chunk, both ways, 300 ms late
//   await proxy.stall()        // nothing forwarded; connections stay open
//   await proxy.reset()        // RST on every open connection; resolves to how many were open
//   await proxy.cut(3)         // the next reply cut after 3 bytes, then closed
//   await proxy.refuse()       // the port refuses new connections
//   await proxy.resume()       // all faults cleared
//   await proxy.close()
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createConnection } from 'node:net'
import { createInterface } from 'node:readline'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** The proxy binary: $RATEWINDOW_FAULTPROXY or the workspace's release build. */
export function faultProxyBinary() {
  if (process.env.RATEWINDOW_FAULTPROXY) return process.env.RATEWINDOW_FAULTPROXY
  const target = process.env.CARGO_TARGET_DIR ?? join(ROOT, 'target')
  return join(target, 'release', 'ratewindow-faultproxy')
}

const splitAddr = (addr) => {
  const at = addr.lastIndexOf(':')
  return { host: addr.slice(0, at), port: Number(addr.slice(at + 1)) }
}

export class FaultProxy {
  /** Starts a proxy in front of targetHost:targetPort; resolves once it listens. */
  static async start(targetHost, targetPort) {
    const path = faultProxyBinary()
    if (!existsSync(path)) {
      throw new Error(`${path} is missing: run \`cargo build --release -p ratewindow-faultproxy\` (scripts/test-node.sh does)`)
    }
    // stdin stays a pipe: the proxy exits when it closes, so it dies with this process.
    const child = spawn(path, ['--target', `${targetHost}:${targetPort}`], { stdio: ['pipe', 'pipe', 'inherit'] })
    const lines = createInterface({ input: child.stdout })
    const first = await new Promise((resolve, reject) => {
      lines.once('line', resolve)
      child.once('error', reject)
      child.once('exit', (code) => reject(new Error(`ratewindow-faultproxy exited (${code}) before printing its ports`)))
    })
    const ports = JSON.parse(first)
    const control = createConnection(splitAddr(ports.control))
    control.setNoDelay(true)
    await new Promise((resolve, reject) => {
      control.once('connect', resolve)
      control.once('error', reject)
    })
    return new FaultProxy(child, lines, control, ports)
  }

  #child
  #lines
  #control
  #replies = []
  #waiting = []
  #queue = Promise.resolve()

  constructor(child, lines, control, ports) {
    this.#child = child
    this.#lines = lines
    this.#control = control
    const { host, port } = splitAddr(ports.listen)
    /** The address clients connect to. */
    this.host = host
    this.port = port
    this.target = ports.target
    // Keeps the proxy from holding the event loop open.
    child.unref()
    child.stdout.unref?.()
    const controlLines = createInterface({ input: control })
    controlLines.on('line', (line) => {
      const waiter = this.#waiting.shift()
      if (waiter) waiter(line)
      else this.#replies.push(line)
    })
  }

  /** Sends one command; resolves to the text after `ok`, rejects on `err`. Commands run in order. */
  command(line) {
    const run = this.#queue.then(
      () =>
        new Promise((resolve, reject) => {
          this.#waiting.push((reply) => {
            if (reply === 'ok') resolve('')
            else if (reply.startsWith('ok ')) resolve(reply.slice(3))
            else reject(new Error(`faultproxy ${JSON.stringify(line)}: ${reply}`))
          })
          this.#control.write(`${line}\n`)
        }),
    )
    this.#queue = run.catch(() => {})
    return run
  }

  /** Delays every chunk: client → server by upMs, server → client by downMs (upMs when omitted). */
  latency(upMs, downMs = upMs) {
    return this.command(`latency ${upMs} ${downMs}`)
  }

  /** Stops forwarding both ways; connections, old and new, stay open. */
  stall() {
    return this.command('stall')
  }

  /** Forwards again, the data held first. */
  unstall() {
    return this.command('unstall')
  }

  /** Closes every open connection with a TCP RST on both sides; resolves to how many were open. */
  async reset() {
    return Number((await this.command('reset')).split('=')[1])
  }

  /** Cuts the next server → client chunk after `afterBytes` bytes, then closes that connection. */
  cut(afterBytes) {
    return this.command(`cut ${afterBytes}`)
  }

  /** Closes the listening port: new connections are refused, open ones carry on. */
  refuse() {
    return this.command('refuse')
  }

  /** Listens again on the same port. */
  accept() {
    return this.command('accept')
  }

  /** Clears every fault. */
  resume() {
    return this.command('resume')
  }

  /** { open, accepted, up, down, resets, cuts, cut_pending } */
  async stats() {
    const text = await this.command('stats')
    return Object.fromEntries(text.split(' ').map((pair) => pair.split('=')))
  }

  /** Stops the proxy; its connections close with it. */
  async close() {
    this.#control.destroy()
    this.#lines.close()
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return
    const exited = new Promise((resolve) => this.#child.once('exit', resolve))
    this.#child.stdin.end()
    const timer = setTimeout(() => this.#child.kill('SIGKILL'), 5000)
    await exited
    clearTimeout(timer)
  }

  async [Symbol.asyncDispose]() {
    await this.close()
  }
}
