// A DAG-flow task worker in Node: it serves one step of a flow over PostgreSQL's
// SQL functions alone (perdure.claim_tasks / complete_task / fail_task), beside
// Python workers that serve the other steps of the same flow.
//
//   npm install                      # pg, the PostgreSQL client
//   PERDURE_DATABASE_URL=postgresql://postgres@127.0.0.1/postgres \
//   PERDURE_SCHEMA=perdure node worker.js analyze_website sentiment
//
// It exits after STOP_AFTER tasks when that is set (for tests), else runs forever.
import pg from "pg";

const [flow = "analyze_website", step = "sentiment"] = process.argv.slice(2);
const schema = process.env.PERDURE_SCHEMA || "perdure";
const stopAfter = Number(process.env.STOP_AFTER || 0);
const client = new pg.Client({ connectionString: process.env.PERDURE_DATABASE_URL });

// The step's work: here, a toy sentiment score of the fetched page.
function handle(input) {
  const content = input.website?.content ?? "";
  return { score: content.includes("welcome") ? 0.8 : 0.2, by: "node" };
}

async function main() {
  await client.connect();
  await client.query(`SET search_path TO "${schema.replaceAll('"', '""')}"`);
  let done = 0;
  while (!stopAfter || done < stopAfter) {
    const { rows } = await client.query(
      "SELECT * FROM claim_tasks($1, $2, qty => 5, steps => ARRAY[$3])",
      [flow, `node-${process.pid}`, step],
    );
    if (rows.length === 0) {
      await new Promise((resolve) => setTimeout(resolve, 200)); // poll again soon
      continue;
    }
    // task.lease_token is a bigint of 64 random bits: node-postgres gives it as a
    // string, which goes back as it came (a Number would round it).
    for (const task of rows) {
      try {
        const output = handle(task.input);
        const { rows: [ok] } = await client.query(
          "SELECT complete_task($1, $2, $3, $4, $5) AS took",
          [task.run_id, task.step, task.task_index, JSON.stringify(output), task.lease_token],
        );
        if (!ok.took) console.error(`task ${task.run_id}/${task.step}/${task.task_index}: lease lost`);
      } catch (err) {
        await client.query("SELECT fail_task($1, $2, $3, $4, $5)",
          [task.run_id, task.step, task.task_index, String(err), task.lease_token]);
      }
      done += 1;
      console.log(`completed ${task.run_id} ${task.step}[${task.task_index}]`);
    }
  }
  await client.end();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
