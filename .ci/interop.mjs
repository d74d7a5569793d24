// interop.mjs drives a built telson with the official TypeScript SDK client
// (@modelcontextprotocol/sdk, Client + StdioClientTransport). .ci/run copies
// it next to a temporary npm install and runs: node interop.mjs /path/to/telson
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const telson = process.argv[2];
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
};

const transport = new StdioClientTransport({ command: telson, args: [], stderr: "inherit" });
const client = new Client({ name: "telson-interop", version: "1.0.0" }, { capabilities: {} });
await client.connect(transport);
check(client.getServerVersion()?.name === "telson", "initialize: serverInfo.name is telson");

await client.ping();
check(true, "ping");

const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
check(names.includes("Bash"), `tools/list: ${names.length} tools: ${names.join(", ")}`);

const res = await client.callTool({ name: "Bash", arguments: { command: "echo interop-$((6*7))" } });
check(!res.isError && res.content[0].text === "interop-42\n", `tools/call Bash: ${JSON.stringify(res.content[0].text)}`);
check(res.structuredContent?.exit_code === 0, "tools/call Bash: structuredContent validated against outputSchema");

const bad = await client.callTool({ name: "Bash", arguments: { timeout: "soon" } });
check(bad.isError === true && /command/.test(bad.content[0].text), `tools/call with bad arguments is an isError result: ${bad.content[0].text}`);

const failing = await client.callTool({ name: "Bash", arguments: { command: "exit 3" } });
check(failing.isError === true && /exit status 3/.test(failing.content[0].text), "tools/call Bash exit 3 is an isError result");

try {
  await client.request({ method: "server/frobnicate", params: {} }, z.object({}).passthrough());
  check(false, "unknown method answered with a result");
} catch (e) {
  check(e instanceof McpError && e.code === -32601, `unknown method: ${e.code} ${e.message}`);
}

try {
  await client.callTool({ name: "NoSuchTool", arguments: {} });
  check(false, "unknown tool answered with a result");
} catch (e) {
  check(e instanceof McpError && e.code === -32602, `unknown tool: ${e.code}`);
}

await client.close();
console.log(failures === 0 ? "interop: all passed" : `interop: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
