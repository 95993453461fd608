"""The fake batch-job APIs, proven faithful by each provider's own SDK over loopback:
openai's ``client.batches``, boto3's ``bedrock`` and ``sagemaker`` clients."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import openai
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from mlstream.testing.fake_batch import FakeBedrockBatch, FakeOpenAIBatches, FakeSageMakerBatch

from ..support.aws import isolate_aws_environment

TIMEOUT = 5.0


@pytest.fixture(autouse=True)
def _isolated_aws_environment(monkeypatch, tmp_path):
    isolate_aws_environment(monkeypatch, tmp_path)


# ------------------------------------------------------------------------------- OpenAI

@pytest.fixture
def batches() -> Iterator[FakeOpenAIBatches]:
    with FakeOpenAIBatches() as fake:
        yield fake


def openai_client(fake: FakeOpenAIBatches, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(api_key=key or fake.api_key, base_url=fake.url + "/v1", max_retries=0, timeout=TIMEOUT)


def test_openai_batch_create_retrieve_list(batches):
    client = openai_client(batches)
    batch = client.batches.create(input_file_id="file-abc", endpoint="/v1/embeddings", completion_window="24h")
    assert batch.id.startswith("batch_") and batch.status == "validating" and batch.input_file_id == "file-abc"
    assert batch.request_counts.total == 0 and batch.expires_at == batch.created_at + 86400
    assert client.batches.retrieve(batch.id) == batch
    assert [b.id for b in client.batches.list()] == [batch.id]


def test_openai_batch_moves_only_when_the_test_moves_it(batches):
    client = openai_client(batches)
    batch = client.batches.create(input_file_id="file-abc", endpoint="/v1/chat/completions", completion_window="24h")
    assert client.batches.retrieve(batch.id).status == "validating"
    batches.set_status(batch.id, "in_progress")
    assert client.batches.retrieve(batch.id).in_progress_at is not None
    batches.set_status(batch.id, "completed")
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.output_file_id.startswith("file-")
    assert done.completed_at is not None and done.request_counts.completed == 3


def test_openai_batch_cancel(batches):
    client = openai_client(batches)
    batch = client.batches.create(input_file_id="file-abc", endpoint="/v1/embeddings", completion_window="24h")
    cancelled = client.batches.cancel(batch.id)
    assert cancelled.status == "cancelling" and cancelled.cancelling_at is not None
    with pytest.raises(openai.ConflictError, match="Cannot cancel a batch with status 'cancelling'"):
        client.batches.cancel(batch.id)
    batches.set_status(batch.id, "cancelled")
    assert client.batches.retrieve(batch.id).status == "cancelled"


def test_openai_batch_errors(batches):
    with pytest.raises(openai.AuthenticationError):
        openai_client(batches, key="sk-wrong").batches.list()
    client = openai_client(batches)
    with pytest.raises(openai.NotFoundError, match="No batch found with id 'batch_nope'"):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.BadRequestError, match="Supported values are"):
        client.batches.create(input_file_id="file-abc", endpoint="/v1/nope", completion_window="24h")  # type: ignore[arg-type]
    assert batches.stats.auth_failures == 1


# ------------------------------------------------------------------------------ Bedrock

@pytest.fixture
def bedrock_jobs() -> Iterator[FakeBedrockBatch]:
    with FakeBedrockBatch() as fake:
        yield fake


def aws_client(service: str, fake, secret_key: str | None = None):
    return boto3.client(service, region_name=fake.region, endpoint_url=fake.url,
                        aws_access_key_id=fake.access_key, aws_secret_access_key=secret_key or fake.secret_key,
                        config=Config(retries={"total_max_attempts": 1}, connect_timeout=TIMEOUT,
                                      read_timeout=TIMEOUT))


BEDROCK_JOB = dict(jobName="my-batch-job", roleArn="arn:aws:iam::123456789012:role/batch",
                   modelId="amazon.titan-embed-text-v2:0",
                   inputDataConfig={"s3InputDataConfig": {"s3Uri": "s3://bucket/input.jsonl"}},
                   outputDataConfig={"s3OutputDataConfig": {"s3Uri": "s3://bucket/output/"}})


def test_bedrock_model_invocation_job_lifecycle(bedrock_jobs):
    client = aws_client("bedrock", bedrock_jobs)
    arn = client.create_model_invocation_job(**BEDROCK_JOB)["jobArn"]
    assert arn.startswith("arn:aws:bedrock:us-east-1:123456789012:model-invocation-job/")
    job = client.get_model_invocation_job(jobIdentifier=arn)
    assert job["status"] == "Submitted" and job["jobName"] == "my-batch-job"
    assert job["submitTime"].year >= 2024  # botocore parsed the timestamp
    # The identifier as botocore sends it: the ARN percent-encoded as one path segment.
    assert "/model-invocation-job/arn%3Aaws%3Abedrock%3A" in bedrock_jobs.stats.requests[-1].path
    assert "%2F" in bedrock_jobs.stats.requests[-1].path
    bedrock_jobs.set_status(arn, "InProgress")
    assert client.get_model_invocation_job(jobIdentifier=arn.rsplit("/", 1)[1])["status"] == "InProgress"
    client.stop_model_invocation_job(jobIdentifier=arn)
    assert client.get_model_invocation_job(jobIdentifier=arn)["status"] == "Stopping"
    bedrock_jobs.set_status(arn, "Stopped")
    stopped = client.get_model_invocation_job(jobIdentifier=arn)
    assert stopped["status"] == "Stopped" and "endTime" in stopped


def test_bedrock_model_invocation_job_errors(bedrock_jobs):
    with pytest.raises(ClientError) as refused:
        aws_client("bedrock", bedrock_jobs, secret_key="wrong").create_model_invocation_job(**BEDROCK_JOB)
    assert refused.value.response["Error"]["Code"] == "InvalidSignatureException"
    client = aws_client("bedrock", bedrock_jobs)
    with pytest.raises(ClientError) as missing:
        client.get_model_invocation_job(jobIdentifier="abcdefabcdef")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"
    arn = client.create_model_invocation_job(**BEDROCK_JOB)["jobArn"]
    bedrock_jobs.set_status(arn, "Completed")
    with pytest.raises(ClientError) as done:
        client.stop_model_invocation_job(jobIdentifier=arn)
    assert done.value.response["Error"]["Code"] == "ValidationException"


# ---------------------------------------------------------------------------- SageMaker

@pytest.fixture
def transform_jobs() -> Iterator[FakeSageMakerBatch]:
    with FakeSageMakerBatch() as fake:
        yield fake


TRANSFORM_JOB = dict(
    TransformJobName="SM-offline-batch-transform", ModelName="DJL-Text-Embedding-Model-imageforjsonlines",
    BatchStrategy="SingleRecord",
    TransformInput={"ContentType": "application/json", "SplitType": "Line",
                    "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
                                                    "S3Uri": "s3://offlinebatch/sagemaker_djl_batch_input.json"}}},
    TransformOutput={"AssembleWith": "Line", "Accept": "application/json", "S3OutputPath": "s3://offlinebatch/output"},
    TransformResources={"InstanceCount": 1, "InstanceType": "ml.c5.xlarge"})


def test_sagemaker_transform_job_lifecycle(transform_jobs):
    client = aws_client("sagemaker", transform_jobs)
    arn = client.create_transform_job(**TRANSFORM_JOB)["TransformJobArn"]
    assert arn == "arn:aws:sagemaker:us-east-1:123456789012:transform-job/sm-offline-batch-transform"
    job = client.describe_transform_job(TransformJobName="SM-offline-batch-transform")
    assert job["TransformJobStatus"] == "InProgress" and job["BatchStrategy"] == "SingleRecord"
    assert job["CreationTime"].year >= 2024
    client.stop_transform_job(TransformJobName="SM-offline-batch-transform")
    assert client.describe_transform_job(TransformJobName="SM-offline-batch-transform")[
        "TransformJobStatus"] == "Stopping"
    transform_jobs.set_status("SM-offline-batch-transform", "Stopped")
    stopped = client.describe_transform_job(TransformJobName="SM-offline-batch-transform")
    assert stopped["TransformJobStatus"] == "Stopped" and "TransformEndTime" in stopped


def test_sagemaker_transform_job_errors(transform_jobs):
    with pytest.raises(ClientError) as refused:
        aws_client("sagemaker", transform_jobs, secret_key="wrong").create_transform_job(**TRANSFORM_JOB)
    assert refused.value.response["Error"]["Code"] == "InvalidSignatureException"
    client = aws_client("sagemaker", transform_jobs)
    with pytest.raises(ClientError) as missing:
        client.describe_transform_job(TransformJobName="nope")
    assert missing.value.response["Error"]["Code"] == "ValidationException"
    client.create_transform_job(**TRANSFORM_JOB)
    with pytest.raises(ClientError) as taken:
        client.create_transform_job(**TRANSFORM_JOB)
    assert taken.value.response["Error"]["Code"] == "ResourceInUse"
    transform_jobs.set_status("SM-offline-batch-transform", "Completed")
    with pytest.raises(ClientError) as done:
        client.stop_transform_job(TransformJobName="SM-offline-batch-transform")
    assert done.value.response["Error"]["Code"] == "ValidationException"
