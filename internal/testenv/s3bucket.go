package testenv

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Bucket is a bucket of a test's own on the S3 server of S3, and a
// client with the tests' credentials to reach behind a store on it.
type S3Bucket struct {
	Env    S3Env
	Client *s3.Client
	Name   string
}

// StoreURL is the URL of a fixture store under prefix in the bucket.
func (b S3Bucket) StoreURL(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?region=%s&endpoint_url=%s", b.Name, prefix, url.QueryEscape(b.Env.Region), url.QueryEscape(b.Env.Endpoint))
}

// FreshS3Bucket creates a bucket named after t and prefix on the server of
// S3 (skipping as S3 does when it is not configured) and, when t ends,
// deletes every object in it and then the bucket.
func FreshS3Bucket(t testing.TB, prefix string) S3Bucket {
	t.Helper()
	env := S3(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	client := s3.New(s3.Options{
		HTTPClient:   &http.Client{Transport: tr},
		Region:       env.Region,
		BaseEndpoint: aws.String(env.Endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: env.AccessKey, SecretAccessKey: env.SecretKey}, nil
		}),
	})
	bucket := UniqueName(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("testenv: CreateBucket %s at %s: %v", bucket, env.Endpoint, err)
	}
	t.Cleanup(func() {
		defer tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				t.Errorf("testenv: cleanup: list %s: %v", bucket, err)
				return
			}
			for _, o := range page.Contents {
				if _, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: o.Key}); err != nil {
					t.Errorf("testenv: cleanup: delete %s: %v", aws.ToString(o.Key), err)
				}
			}
		}
		if _, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Errorf("testenv: cleanup: DeleteBucket %s: %v", bucket, err)
		}
	})
	return S3Bucket{Env: env, Client: client, Name: bucket}
}
