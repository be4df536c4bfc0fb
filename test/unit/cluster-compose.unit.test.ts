/**
 * The cluster deployment files: infra/docker-compose.yml, infra/Dockerfile, infra/nginx.conf.
 * No Docker engine runs here. When a Compose CLI is available (`docker compose` or
 * `docker-compose`), it validates the file; otherwise the test says so and the structural
 * checks below (YAML parsed, services, ports, environment, dependencies) still run.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { loadConfig } from '../../infra/config.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const composeFile = path.join(root, 'infra', 'docker-compose.yml');
type Service = {
  image?: string;
  build?: { context: string; dockerfile: string };
  command?: string[];
  environment?: Record<string, string>;
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  volumes?: string[];
  restart?: string;
};
const compose = parse(fs.readFileSync(composeFile, 'utf8'), { merge: true }) as { services: Record<string, Service>; volumes: Record<string, unknown> };
const services = compose.services;

function composeCli(): { name: string; args: string[] } | null {
  for (const [cmd, pre] of [['docker', ['compose']], ['docker-compose', []]] as const) {
    const probe = spawnSync(cmd, [...pre, 'version'], { encoding: 'utf8' });
    if (probe.status === 0) return { name: cmd, args: [...pre] };
  }
  return null;
}

describe('infra/docker-compose.yml', () => {
  it('is valid for the Compose CLI when one is installed', () => {
    const cli = composeCli();
    if (!cli) {
      console.log('SKIPPED: `docker compose config` (no Compose CLI here); structural checks only');
      return;
    }
    const result = spawnSync(cli.name, [...cli.args, '-f', composeFile, 'config', '--quiet'], { encoding: 'utf8', cwd: root });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });

  it('brings up the three engines, a worker, two gateways and one proxy', () => {
    expect(Object.keys(services).sort()).toEqual(['eventstore', 'gateway1', 'gateway2', 'kafka', 'mongo', 'proxy', 'worker']);
    expect(services.eventstore!.environment).toMatchObject({ EVENTSTORE_CLUSTER_SIZE: '1', EVENTSTORE_INSECURE: 'true' });
    expect(services.mongo!.command).toEqual(expect.arrayContaining(['--replSet', 'rs0']));
    expect(services.mongo!.healthcheck!.test.join(' ')).toContain('rs.initiate');
    expect(services.kafka!.environment).toMatchObject({ KAFKA_PROCESS_ROLES: 'broker,controller', KAFKA_NUM_PARTITIONS: '1' });
    // The relay creates its topic; a gateway's consumer must not create it with broker defaults first.
    expect(services.kafka!.environment!.KAFKA_AUTO_CREATE_TOPICS_ENABLE).toBe('false');
    for (const name of ['eventstore', 'mongo', 'kafka', 'worker']) expect(services[name]!.healthcheck).toBeDefined();
  });

  it('configures every service process for the cluster store, with a valid configuration', () => {
    for (const name of ['worker', 'gateway1', 'gateway2']) {
      const s = services[name]!;
      expect(s.build).toEqual({ context: '..', dockerfile: 'infra/Dockerfile' });
      expect(s.volumes).toContain('shared-data:/data'); // one key ring and blob store for all
      // As Compose gives them with nothing set on the host: `${NAME:-default}` is its default.
      const env = Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, String(v).replace(/\$\{\w+:-([^}]*)\}/g, '$1')]));
      const config = loadConfig(env, '/');
      expect(config.store).toBe('cluster');
      expect(config.cluster).toEqual({
        eventStoreUrl: 'esdb://eventstore:2113?tls=false',
        mongoUrl: 'mongodb://mongo:27017/agent_identity?replicaSet=rs0',
        kafkaBrokers: ['kafka:9092'],
      });
      for (const engine of ['eventstore', 'mongo', 'kafka']) expect(s.depends_on?.[engine]?.condition).toBe('service_healthy');
    }
    expect(services.worker!.command).toEqual(['node', '--require', './infra/boot.cjs', '--import', 'tsx', 'services/worker.ts']);
    // Healthy once the key ring exists where infra/keyring.ts writes it (DATA_DIR/keys).
    const keyring = fs.readFileSync(path.join(root, 'infra', 'keyring.ts'), 'utf8');
    expect(keyring).toMatch(/path\.join\(dataDir, 'keys'\)/);
    for (const file of ['jwt-ed25519.pem', 'hmac.key']) {
      expect(keyring).toContain(`'${file}'`);
      expect(services.worker!.healthcheck!.test.join(' ')).toContain(`/data/keys/${file}`);
    }
    expect(services.worker!.ports).toBeUndefined();
    expect(services.worker!.environment!.SMTP_PORT).toBe('0');
    // Gateways wait for the worker: it creates the shared signing keys first.
    expect(services.gateway1!.depends_on!.worker!.condition).toBe('service_healthy');
    expect(services.gateway2!.depends_on!.worker!.condition).toBe('service_healthy');
    for (const name of ['gateway1', 'gateway2']) expect(services[name]!.environment).toMatchObject({ HOST: '0.0.0.0', PORT: '8000' });
  });

  it('publishes the gateways through one port, proxied to both', () => {
    expect(services.proxy!.ports).toEqual(['${HTTP_PORT:-8000}:8080']);
    expect(services.gateway1!.ports).not.toContain('8000:8000');
    const nginx = fs.readFileSync(path.join(root, 'infra', 'nginx.conf'), 'utf8');
    expect(nginx).toMatch(/server gateway1:8000/);
    expect(nginx).toMatch(/server gateway2:8000/);
    expect(nginx).toMatch(/listen 8080;/);
    expect(nginx).toMatch(/proxy_buffering off;/); // SSE
    expect(nginx).toMatch(/client_max_body_size 26m;/); // 25 MiB attachment uploads pass
    // Checked against a real nginx 1.22 (a browser's EventSource across a restart): the stream
    // is closed (444) while no gateway is up, never answered 502/503; the scheme a TLS proxy
    // in front set is kept; nginx's own errors are JSON.
    expect(nginx).toMatch(/location \/api\/events\/stream \{[^}]*error_page 502 503 504 = @close;[^}]*\}\s*location @close \{\s*return 444;/);
    expect(nginx).toMatch(/proxy_set_header X-Forwarded-Proto \$forwarded_proto;/);
    // A read is answered 503 (send it again), a write 502 (it may have been applied): a named location keeps the method.
    expect(nginx).toMatch(/error_page 502 503 504 = @gateway_unavailable;/);
    expect(nginx).toMatch(/if \(\$request_method ~ \^\(GET\|HEAD\|OPTIONS\)\$\) \{\s*add_header Retry-After 1 always;\s*return 503 '\{[^']*"code":"service_unavailable"\}';\s*\}\s*return 502 '\{[^']*"code":"gateway_error"\}';/);
    const mounted = services.proxy!.volumes!.find((v) => v.includes('nginx.conf'))!;
    expect(fs.existsSync(path.join(root, 'infra', mounted.split(':')[0]!))).toBe(true);
    expect(Object.keys(compose.volumes).sort()).toEqual(['eventstore-data', 'kafka-data', 'mongo-data', 'shared-data']);
  });

  it('has a Dockerfile that copies every source folder the service runs from', () => {
    const dockerfile = fs.readFileSync(path.join(root, 'infra', 'Dockerfile'), 'utf8');
    for (const dir of ['infra', 'projections', 'schemas', 'services']) {
      expect(dockerfile).toContain(`COPY ${dir} ./${dir}`);
      expect(fs.existsSync(path.join(root, dir))).toBe(true);
    }
    expect(dockerfile).toMatch(/CMD \["node", "--require", ".\/infra\/boot.cjs", "--import", "tsx", "services\/main.ts"\]/);
    expect(dockerfile).toContain('npm ci --omit=dev');
  });
});
