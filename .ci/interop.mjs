// interop.mjs drives a built telson with the official TypeScript SDK client
// (@modelcontextprotocol/sdk, Client + StdioClientTransport). .ci/run copies
// it next to a temporary npm install and runs: node interop.mjs /path/to/telson
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const telson = process.argv[2];
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
};

const stateDir = (await import("node:fs")).mkdtempSync((await import("node:path")).join((await import("node:os")).tmpdir(), "telson-state-"));
const env = { ...process.env, TELSON_STATE_DIR: stateDir, TELSON_SEARCH_TIMEOUT_MS: "2000" };
const transport = new StdioClientTransport({ command: telson, args: [], env, stderr: "inherit" });
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

// Every tool once, so the client validates each structuredContent against
// the tool's outputSchema, with a page served here for ReadDocs.
const http = await import("node:http");
const fs = await import("node:fs");
const os = await import("node:os");
const path = await import("node:path");
const page = http.createServer((req, res) => {
  res.setHeader("content-type", "text/html");
  res.end("<html><head><title>Interop page</title></head><body><main><h1>Hello</h1><p>from <b>node</b></p><script>document.querySelector('main').insertAdjacentHTML('beforeend','<p>added by script</p>')</script></main></body></html>");
});
await new Promise((ok) => page.listen(0, "127.0.0.1", ok));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "telson-interop-"));
const png = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==", "base64");
fs.writeFileSync(path.join(dir, "dot.png"), png);
const calls = [
  ["ReadImage", { file_path: path.join(dir, "dot.png") }, (r) => r.content.some((c) => c.type === "image")],
  ["ReadDocs", { url: `http://127.0.0.1:${page.address().port}/` }, (r) => /Hello/.test(r.content[0].text) && /added by script/.test(r.content.map((c) => c.text).join(""))],
  ["WebSearch", { query: "telson interop", engines: ["wikipedia"] }, () => true],
  ["TaskManager", { action: "create", text: "interop task" }, (r) => !r.isError],
  ["TaskManager", { action: "list" }, (r) => /interop task/.test(r.content.map((c) => c.text).join(""))],
  ["PlanMode", { action: "status" }, (r) => !r.isError && r.structuredContent?.active === false],
  ["InvokeSkill", { skill_name: "no-such-skill" }, (r) => r.isError === true],
  ["SetCallback", { action: "list" }, (r) => !r.isError],
  ["AskUserQuestion", { questions_json: JSON.stringify({ questions: [{ text: "Which?", options: ["A", "B"] }] }) }, (r) => !r.isError && r.structuredContent?.status === "ask_in_chat"],
  ["BackgroundBash", { command: "echo bg-interop" }, (r) => !r.isError],
  ["ListBgTasks", {}, (r) => !r.isError],
];
for (const [name, args, ok] of calls) {
  if (!names.includes(name)) {
    check(false, `${name} is not listed`);
    continue;
  }
  try {
    const r = await client.callTool({ name, arguments: args });
    check(ok(r), `${name}: ${JSON.stringify(r.content.map((c) => c.text ?? c.type).join(" ")).slice(0, 100)}`);
  } catch (e) {
    check(false, `${name}: ${e.message}`);
  }
}
page.close();

await client.close();
// AskUserQuestion through real elicitation: a client that declares it and
// picks the first option of every question.
{
  const t2 = new StdioClientTransport({ command: telson, args: [], env, stderr: "inherit" });
  const c2 = new Client({ name: "telson-interop-elicit", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  let asked = null;
  c2.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked = req.params;
    const content = {};
    for (const [key, prop] of Object.entries(req.params.requestedSchema.properties)) {
      const first = prop.oneOf?.[0]?.const ?? prop.enum?.[0] ?? prop.items?.anyOf?.[0]?.const ?? prop.items?.enum?.[0];
      if (first !== undefined) content[key] = prop.type === "array" ? [first] : first;
    }
    return { action: "accept", content };
  });
  await c2.connect(t2);
  const r = await c2.callTool({ name: "AskUserQuestion", arguments: { questions_json: JSON.stringify({ questions: [{ question: "Which database?", header: "DB", options: [{ label: "PostgreSQL", description: "server" }, { label: "SQLite", description: "file" }] }] }) } });
  const text = r.content.map((c) => c.text).join("");
  check(asked !== null && !r.isError && text.includes('"Which database?"="PostgreSQL"'), `AskUserQuestion via elicitation/create: ${JSON.stringify(text).slice(0, 120)}`);
  await c2.close();
}

console.log(failures === 0 ? "interop: all passed" : `interop: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
